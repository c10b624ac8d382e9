// An Express upstream with Express's default routing (not strict, not case
// sensitive). It answers each request with the handler that took it, so a
// test can hold the proxy's reading of a path to Express's. Usage: node
// server.js PORT (on 127.0.0.1).
const express = require("express");

const app = express();
app.post("/v1/charges", (req, res) => res.status(201).json({ handler: "charges" }));
app.post("/v1/charges/:id/capture", (req, res) => res.status(201).json({ handler: "capture" }));
app.use((req, res) => res.status(404).json({ handler: "none" }));
app.listen(Number(process.argv[2]), "127.0.0.1");
