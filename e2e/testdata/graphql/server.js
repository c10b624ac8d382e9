// A GraphQL upstream: graphql-js served by graphql-http, the reference
// GraphQL-over-HTTP server. It counts what it executes, so a test can tell
// a mutation executed once from one executed twice, and a query that
// reached it from one the proxy answered. Usage: node server.js PORT (on
// 127.0.0.1). GET /counts answers the counts as JSON, outside GraphQL.
const http = require("http");
const { buildSchema } = require("graphql");
const { createHandler } = require("graphql-http/lib/use/http");

const schema = buildSchema(`
  directive @idempotent(key: String!) on FIELD | MUTATION
  type Charge { id: Int!, amount: Int! }
  type Query { charges: Int!, ping: String! }
  type Mutation { charge(amount: Int!): Charge! }
`);

const counts = { charge: 0, query: 0 };
const root = {
  charges: () => { counts.query++; return counts.charge; },
  ping: () => { counts.query++; return "pong"; },
  charge: ({ amount }) => { counts.charge++; return { id: counts.charge, amount }; },
};

const graphql = createHandler({ schema, rootValue: root });
http.createServer((req, res) => {
  if (req.url === "/counts") {
    res.setHeader("Content-Type", "application/json");
    res.end(JSON.stringify(counts));
    return;
  }
  if (req.url.startsWith("/graphql")) {
    graphql(req, res);
    return;
  }
  res.writeHead(404).end();
}).listen(Number(process.argv[2]), "127.0.0.1");
