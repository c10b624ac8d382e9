// The client against the built proxy and the scripted upstream of
// e2e/clients_harness_test.go, which runs these tests and sets the URLs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import {
  IdempotentClient, MemoryStorage, ProblemError, PayloadMismatchError, KeyExpiredError, GaveUpError,
} from "../idempotency.js";

const PROXY = process.env.IDEMPOTENCY_PROXY_URL;
const SLOW_PROXY = process.env.IDEMPOTENCY_SLOW_PROXY_URL;
const FRONT = process.env.IDEMPOTENCY_FRONT_URL;
const UPSTREAM = process.env.IDEMPOTENCY_UPSTREAM_URL;
const skip = PROXY ? false : "needs the harness (go test -run TestJavaScriptClientFollowsTheContract ./e2e)";
const contract = PROXY ? JSON.parse(readFileSync(process.env.IDEMPOTENCY_CONTRACT, "utf8")) : { problems: [] };

let ids = 0;
const newId = () => `js-${process.pid}-${++ids}`;
const count = async (id) => (await fetch(`${UPSTREAM}/count/${id}`)).json();
const release = (id) => fetch(`${UPSTREAM}/release/${id}`, { method: "POST" });
const errorClass = { "payload-mismatch": PayloadMismatchError, "key-expired": KeyExpiredError };

for (const row of contract.problems.filter((p) => p.listeners.includes("proxy"))) {
  test(`answer ${row.type}: ${row.client}`, { skip }, async () => {
    const id = newId();
    const retries = [];
    const client = new IdempotentClient({ maxAttempts: 3, baseDelay: 20, maxDelay: 50, onRetry: (r) => retries.push(r) });
    const op = client.request(`${PROXY}/answer/${row.type}/${id}`, { method: "POST", json: {}, operation: id });
    if (row.client === "retry") {
      const res = await op;
      assert.equal(res.status, 201);
      assert.equal(retries.length, 1);
      assert.equal(retries[0].status, row.status);
      assert.equal(retries[0].problem.type, contract.problem_base + row.type);
      if (row.retry_after) assert.equal(retries[0].delay, 50, "Retry-After: 1, capped by maxDelay");
      else assert.ok(retries[0].delay < 20, `jittered backoff ${retries[0].delay} under baseDelay`);
      assert.equal((await count(id)).hits, 2);
    } else {
      await assert.rejects(op, (err) => {
        assert.ok(err instanceof (errorClass[row.error] ?? ProblemError), `${err.name}: ${err.message}`);
        assert.equal(err.status, row.status);
        assert.equal(err.problem.type, contract.problem_base + row.type);
        return true;
      });
      assert.equal((await count(id)).hits, 1, "a stop answer is not retried");
    }
    assert.equal(client.pending(id), null, "a final answer drops the operation's key");
  });
}

test("lost answer: the retry gets the replay", { skip }, async () => {
  const id = newId();
  const client = new IdempotentClient({ baseDelay: 10 });
  const res = await client.request(`${FRONT}/lose/${id}`, { method: "POST", json: { amount: 1 } });
  assert.equal(res.status, 201);
  assert.equal(res.replayed, true);
  assert.equal(res.attempts, 2);
  assert.equal((await count(id)).executions, 1);
});

test("attempt timeout while in flight: one execution, replayed", { skip }, async () => {
  const id = newId();
  let released = false;
  const client = new IdempotentClient({
    maxAttempts: 20, baseDelay: 10, maxDelay: 50, attemptTimeout: 300,
    onRetry: (r) => {
      // The first attempt timed out and a later one found it running.
      if (r.problem?.type?.endsWith("/in-flight") && !released) {
        released = true;
        release(id);
      }
    },
  });
  const res = await client.request(`${PROXY}/slow/${id}`, { method: "POST", json: { amount: 2 } });
  assert.equal(res.replayed, true);
  const seen = await count(id);
  assert.equal(seen.executions, 1);
  assert.equal(new Set(seen.keys).size, 1, "every attempt carried the same key");
});

test("upstream timeout, then the running call's answer: one execution", { skip }, async () => {
  const id = newId();
  const seen = [];
  const client = new IdempotentClient({
    maxAttempts: 20, baseDelay: 10, maxDelay: 50,
    onRetry: (r) => {
      if (r.problem) seen.push(r.problem.type.split("/").pop());
      if (r.problem?.type?.endsWith("/in-flight") && seen.filter((t) => t === "in-flight").length === 1) release(id);
    },
  });
  const res = await client.request(`${SLOW_PROXY}/slow/${id}`, { method: "POST", json: { amount: 5 } });
  assert.deepEqual(seen.slice(0, 2), ["upstream-timeout", "in-flight"]);
  assert.equal(res.replayed, true);
  assert.equal((await count(id)).executions, 1);
});

test("attempts run out: GaveUpError, the key kept for a later call", { skip }, async () => {
  const id = newId();
  const client = new IdempotentClient({ maxAttempts: 3, baseDelay: 10, maxDelay: 20 });
  await assert.rejects(client.request(`${PROXY}/always/store-unavailable/${id}`, { method: "POST", json: {}, operation: id }), (err) => {
    assert.ok(err instanceof GaveUpError, `${err.name}: ${err.message}`);
    assert.equal(err.attempts, 3);
    assert.equal(err.status, 503);
    assert.equal(err.problem.type, contract.problem_base + "store-unavailable");
    assert.equal(client.pending(id), err.key);
    return true;
  });
  const seen = await count(id);
  assert.equal(seen.hits, 3);
  assert.equal(new Set(seen.keys).size, 1);
});

test("key reused with another payload: PayloadMismatchError", { skip }, async () => {
  const id = newId();
  const client = new IdempotentClient();
  const key = `reused-${id}`;
  await client.request(`${PROXY}/charge/${id}`, { method: "POST", json: { amount: 1 }, key });
  await assert.rejects(client.request(`${PROXY}/charge/${id}`, { method: "POST", json: { amount: 2 }, key }), PayloadMismatchError);
  const again = await client.request(`${PROXY}/charge/${id}`, { method: "POST", json: { amount: 1 }, key });
  assert.equal(again.replayed, true);
  assert.equal((await count(id)).executions, 1);
});

test("double submit: one operation, one request", { skip }, async () => {
  const id = newId();
  const client = new IdempotentClient();
  const a = client.request(`${PROXY}/charge/${id}`, { method: "POST", json: { amount: 3 }, operation: `pay-${id}` });
  const b = client.request(`${PROXY}/charge/${id}`, { method: "POST", json: { amount: 3 }, operation: `pay-${id}` });
  assert.equal(a, b);
  await a;
  assert.deepEqual(await count(id), { hits: 1, executions: 1, keys: [(await a).key] });
});

test("a resumed operation keeps its key: one execution", { skip }, async () => {
  const id = newId();
  const storage = new MemoryStorage(); // a page's sessionStorage, across a reload
  const op = `checkout-${id}`;
  const first = new IdempotentClient({ storage, maxAttempts: 1, attemptTimeout: 200 });
  await assert.rejects(first.request(`${PROXY}/slow/${id}`, { method: "POST", json: { amount: 4 }, operation: op }), GaveUpError);
  const key = first.pending(op);
  assert.ok(key, "the key is kept while the operation has no final answer");

  let released = false;
  const second = new IdempotentClient({
    storage, maxAttempts: 20, baseDelay: 10, maxDelay: 50,
    onRetry: (r) => { if (!released) { released = true; release(id); } },
  });
  const res = await second.request(`${PROXY}/slow/${id}`, { method: "POST", json: { amount: 4 }, operation: op });
  assert.equal(res.key, key);
  assert.equal(res.replayed, true);
  assert.equal(second.pending(op), null);
  const seen = await count(id);
  assert.equal(seen.executions, 1);
  assert.deepEqual([...new Set(seen.keys)], [key]);
});

test("an aborted operation keeps its key", { skip }, async () => {
  const id = newId();
  const client = new IdempotentClient({ storage: new MemoryStorage() });
  const ctrl = new AbortController();
  const op = client.request(`${PROXY}/slow/${id}`, { method: "POST", json: {}, operation: id, signal: ctrl.signal });
  ctrl.abort(new Error("user left"));
  await assert.rejects(op, GaveUpError);
  assert.ok(client.pending(id));
  await release(id);
});

test("respondAsync: 202, then the status URL's one answer", { skip }, async () => {
  const id = newId();
  let waits = 0;
  const client = new IdempotentClient({
    respondAsync: true, maxPolls: 2000,
    // The upstream holds the call until the release: a poll sees 202 first.
    sleep: async () => {
      if (++waits === 2) await release(id);
      await new Promise((resolve) => setTimeout(resolve, 5));
    },
  });
  const res = await client.request(`${PROXY}/slow/${id}`, { method: "POST", json: { amount: 6 }, headers: { Authorization: "Bearer alice" } });
  assert.equal(res.status, 201);
  assert.equal(res.replayed, true);
  assert.ok(res.polls >= 2, `${res.polls} polls`);
  assert.equal((await res.response.json()).execution, 1);
  assert.equal((await count(id)).executions, 1);
});
