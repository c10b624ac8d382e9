// respondAsync against a fake proxy: the 202's status URL is followed to the
// answer, after each Retry-After, and for maxPolls polls at most. The waits
// go through an injected sleep, so nothing here sleeps.
import { test } from "node:test";
import assert from "node:assert/strict";
import { IdempotentClient, GaveUpError, ProblemError, PROBLEM_BASE } from "../idempotency.js";

const STATUS = "/.well-known/idempotency/s1.sig";

function accepted(retryAfter) {
  return new Response(null, {
    status: 202,
    headers: { Location: STATUS, "Preference-Applied": "respond-async", "Retry-After": String(retryAfter) },
  });
}

// fakeProxy answers the request, then each poll, from answers in order,
// recording what each call sent.
function fakeProxy(answers) {
  const calls = [];
  const fetch = async (url, init) => {
    calls.push({ url: String(url), method: init.method ?? "GET", headers: new Headers(init.headers), body: init.body });
    const next = answers[Math.min(calls.length, answers.length) - 1];
    return next();
  };
  return { calls, fetch };
}

function recordedSleep() {
  const waits = [];
  return { waits, sleep: async (ms) => void waits.push(ms) };
}

test("respondAsync follows the status URL to the one answer, after each Retry-After", async () => {
  const { calls, fetch } = fakeProxy([
    () => accepted(3),
    () => accepted(20),
    () => new Response("charged", { status: 201, headers: { "Idempotent-Replayed": "true" } }),
  ]);
  const { waits, sleep } = recordedSleep();
  const client = new IdempotentClient({ fetch, sleep, respondAsync: true, maxDelay: 5000, storage: "memory" });
  const res = await client.request("http://proxy.test/v1/reports", {
    method: "POST", json: { month: 12 }, headers: { Authorization: "Bearer alice" }, operation: "report",
  });
  assert.equal(res.status, 201);
  assert.equal(res.replayed, true);
  assert.equal(await res.response.text(), "charged");
  assert.equal(res.polls, 2);
  assert.equal(client.pending("report"), null, "the answer ends the operation");
  assert.deepEqual(waits, [3000, 5000], "each 202's Retry-After, capped by maxDelay");

  const [req, ...polls] = calls;
  assert.equal(req.method, "POST");
  assert.equal(req.headers.get("Prefer"), "respond-async");
  assert.equal(polls.length, 2);
  for (const p of polls) {
    assert.equal(p.url, "http://proxy.test" + STATUS, "Location resolved against the request");
    assert.equal(p.method, "GET");
    assert.equal(p.body, undefined);
    assert.equal(p.headers.get("Authorization"), "Bearer alice", "the scope headers go with each poll");
    for (const h of ["Idempotency-Key", "Prefer", "Content-Type"]) assert.equal(p.headers.get(h), null, h);
  }
});

test("respondAsync polls are bounded by maxPolls, and the key is kept", async () => {
  const { calls, fetch } = fakeProxy([() => accepted(1)]);
  const { waits, sleep } = recordedSleep();
  const client = new IdempotentClient({ fetch, sleep, respondAsync: true, maxPolls: 3, storage: "memory" });
  await assert.rejects(client.request("http://proxy.test/v1/reports", { method: "POST", body: "x", operation: "report" }), (err) => {
    assert.ok(err instanceof GaveUpError, `${err.name}: ${err.message}`);
    assert.equal(err.status, 202);
    assert.equal(err.attempts, 3);
    return true;
  });
  assert.equal(calls.length, 1 + 3, "the request and three polls");
  assert.deepEqual(waits, [1000, 1000, 1000]);
  assert.notEqual(client.pending("report"), null, "a later call resumes the operation");
});

test("respondAsync: a poll answered status-unknown stops", async () => {
  const problem = { type: PROBLEM_BASE + "status-unknown", status: 404, title: "unknown status URL" };
  const { calls, fetch } = fakeProxy([
    () => accepted(1),
    () => new Response(JSON.stringify(problem), { status: 404, headers: { "Content-Type": "application/problem+json" } }),
  ]);
  const client = new IdempotentClient({ fetch, sleep: async () => {}, respondAsync: true, storage: "memory" });
  await assert.rejects(client.request("http://proxy.test/v1/reports", { method: "POST", body: "x" }), (err) => {
    assert.ok(err instanceof ProblemError, `${err.name}: ${err.message}`);
    assert.equal(err.status, 404);
    return true;
  });
  assert.equal(calls.length, 2);
});

test("without respondAsync a 202 is the answer and no preference is sent", async () => {
  const { calls, fetch } = fakeProxy([() => accepted(1)]);
  const client = new IdempotentClient({ fetch, sleep: async () => assert.fail("no wait"), storage: "memory" });
  const res = await client.request("http://proxy.test/v1/reports", { method: "POST", body: "x" });
  assert.equal(res.status, 202);
  assert.equal(calls.length, 1);
  assert.equal(calls[0].headers.get("Prefer"), null);
});

test("respondAsync is added to the caller's preferences", async () => {
  const { calls, fetch } = fakeProxy([() => new Response(null, { status: 201 })]);
  const client = new IdempotentClient({ fetch, respondAsync: true, storage: "memory" });
  await client.request("http://proxy.test/v1/reports", { method: "POST", body: "x", headers: { prefer: "return=minimal" } });
  assert.equal(calls[0].headers.get("Prefer"), "return=minimal, respond-async");
});

test("respondAsync: a status URL on another origin is the answer, never polled", async () => {
  const elsewhere = () => new Response(null, {
    status: 202,
    headers: { Location: "http://attacker.test" + STATUS, "Preference-Applied": "respond-async", "Retry-After": "1" },
  });
  const { calls, fetch } = fakeProxy([elsewhere, () => new Response("polled", { status: 200 })]);
  const client = new IdempotentClient({ fetch, sleep: async () => assert.fail("no wait"), respondAsync: true, storage: "memory" });
  const res = await client.request("http://proxy.test/v1/reports", {
    method: "POST", body: "x", headers: { Authorization: "Bearer alice" },
  });
  assert.equal(res.status, 202);
  assert.deepEqual(calls.map((c) => c.url), ["http://proxy.test/v1/reports"], "the request's headers stay on its origin");
});

test("respondAsync: a status URL after a redirect to another origin is the answer, never polled", async () => {
  const redirected = () => {
    const res = accepted(1); // a relative Location, on the origin fetch was redirected to
    Object.defineProperty(res, "url", { value: "http://elsewhere.test/v1/reports" });
    return res;
  };
  const { calls, fetch } = fakeProxy([redirected, () => new Response("polled", { status: 200 })]);
  const client = new IdempotentClient({ fetch, sleep: async () => assert.fail("no wait"), respondAsync: true, storage: "memory" });
  const res = await client.request("http://proxy.test/v1/reports", {
    method: "POST", body: "x", headers: { Authorization: "Bearer alice" },
  });
  assert.equal(res.status, 202);
  assert.equal(calls.length, 1, "the request's headers stay on its origin");
});

test("respondAsync: a poll answered released sends the request again with its key", async () => {
  const { calls, fetch } = fakeProxy([
    () => accepted(1),
    () => new Response(null, { status: 503, headers: { "Idempotent-Released": "true", "Retry-After": "2" } }),
    () => accepted(1),
    () => new Response("charged", { status: 201, headers: { "Idempotent-Replayed": "true" } }),
  ]);
  const { waits, sleep } = recordedSleep();
  const client = new IdempotentClient({ fetch, sleep, respondAsync: true, storage: "memory" });
  const res = await client.request("http://proxy.test/v1/reports", { method: "POST", body: "x", operation: "report" });
  assert.equal(res.status, 201);
  assert.deepEqual(calls.map((c) => c.method), ["POST", "GET", "POST", "GET"], "the released answer is retried by sending the request again");
  assert.equal(calls[2].headers.get("Idempotency-Key"), calls[0].headers.get("Idempotency-Key"), "with its key");
  assert.equal(calls[2].body, "x");
  assert.deepEqual(waits, [1000, 2000, 1000], "the released answer's Retry-After before the resend");
});

test("respondAsync: a poll answered 503 without the released mark polls again", async () => {
  const { calls, fetch } = fakeProxy([
    () => accepted(1),
    () => new Response(null, { status: 503, headers: { "Retry-After": "1" } }),
    () => new Response("charged", { status: 201, headers: { "Idempotent-Replayed": "true" } }),
  ]);
  const client = new IdempotentClient({ fetch, sleep: async () => {}, respondAsync: true, storage: "memory" });
  const res = await client.request("http://proxy.test/v1/reports", { method: "POST", body: "x" });
  assert.equal(res.status, 201);
  assert.deepEqual(calls.map((c) => c.method), ["POST", "GET", "GET"]);
});
