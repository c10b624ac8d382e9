// The operation's signal aborts the returned response's body too, as it
// does fetch's own: a body that stalls after its headers is not read
// forever by a caller who gave the operation a bound. Real fetch, a
// loopback server.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { once } from "node:events";
import { IdempotentClient } from "../idempotency.js";

test("the signal aborts the returned response's body", async (t) => {
  let finish;
  const finished = new Promise((resolve) => (finish = resolve));
  const server = createServer((req, res) => {
    res.writeHead(201, { "Content-Type": "text/plain" });
    res.write("charged ");
    finished.then(() => res.end("in full"));
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  t.after(() => {
    finish();
    server.close();
  });
  const ctrl = new AbortController();
  const client = new IdempotentClient({ storage: "memory" });
  const { response } = await client.request(`http://127.0.0.1:${server.address().port}/v1/charges`, {
    method: "POST", json: { amount: 3 }, signal: ctrl.signal,
  });
  const body = response.text();
  ctrl.abort(new Error("the caller's bound"));
  finish(); // the rest of the body comes after the abort
  await assert.rejects(body, (err) => err.message === "the caller's bound" || err.name === "AbortError");
});
