// A redirect is the operation's answer, never followed with its key: fetch
// would carry the key and the body to the Location — behind the proxy a
// different request under the same key (422 payload-mismatch, though the
// operation ran), on another origin an execution the proxy never sees, run
// again by each retry of a lost answer. Real fetch, loopback servers.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { once } from "node:events";
import { IdempotentClient } from "../idempotency.js";

async function serve(t, handler) {
  const server = createServer(handler);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  t.after(() => server.close());
  return `http://127.0.0.1:${server.address().port}`;
}

for (const [name, elsewhere] of [["same origin", false], ["another origin", true]]) {
  test(`a redirect to ${name} is the answer, never followed with the key`, async (t) => {
    const reached = [];
    const other = await serve(t, (req, res) => {
      reached.push(req.headers["idempotency-key"]);
      res.writeHead(201).end();
    });
    const front = await serve(t, (req, res) => {
      if (req.url !== "/v1/charges") {
        reached.push(req.headers["idempotency-key"]);
        return res.writeHead(201).end();
      }
      res.writeHead(307, { Location: elsewhere ? `${other}/v1/charges` : "/v1/charges/moved" }).end();
    });
    const client = new IdempotentClient({ storage: "memory", sleep: async () => {} });
    const res = await client.request(`${front}/v1/charges`, { method: "POST", json: { amount: 3 }, operation: "charge" });
    assert.equal(res.status, 307);
    assert.equal(res.attempts, 1);
    assert.deepEqual(reached, [], "no request carried the key to the Location");
    assert.equal(client.pending("charge"), null, "the redirect is a final answer");
  });
}
