// Every attempt of one operation against a fake fetch: the same key and the
// same bytes, whatever the caller handed over. The waits go through an
// injected sleep, so nothing here sleeps.
import { test } from "node:test";
import assert from "node:assert/strict";
import { IdempotentClient, GaveUpError, parseRetryAfter } from "../idempotency.js";

// lossyFetch fails the first attempt as a lost connection does, then answers
// 201, recording what each attempt put on the wire: fetch's own reading of
// the init (a FormData gets its multipart boundary here, as on the wire).
function lossyFetch() {
  const sent = [];
  const fetch = async (url, init) => {
    const req = new Request(url, init);
    sent.push({
      key: req.headers.get("Idempotency-Key"),
      contentType: req.headers.get("Content-Type"),
      body: Buffer.from(await req.arrayBuffer()).toString("latin1"),
    });
    if (sent.length === 1) throw new TypeError("fetch failed");
    return new Response("created", { status: 201 });
  };
  return { sent, fetch };
}

const sleep = async () => {};

test("a FormData body is sent as the same bytes on every attempt", async () => {
  const { sent, fetch } = lossyFetch();
  const client = new IdempotentClient({ fetch, sleep, storage: "memory" });
  const form = new FormData();
  form.append("order", "42");
  form.append("note", "gift");
  const res = await client.request("http://proxy.test/v1/orders", { method: "POST", body: form });
  assert.equal(res.status, 201);
  assert.equal(sent.length, 2);
  assert.equal(sent[1].key, sent[0].key);
  assert.equal(sent[1].contentType, sent[0].contentType, "one multipart boundary for the operation");
  assert.equal(sent[1].body, sent[0].body);
  assert.match(sent[0].contentType, /^multipart\/form-data; boundary=/);
  assert.match(sent[0].body, /name="order"\r\n\r\n42\r\n/);
});

test("an Idempotency-Key header the caller sets is the operation's key", async () => {
  const { sent, fetch } = lossyFetch();
  const client = new IdempotentClient({ fetch, sleep, storage: "memory" });
  const res = await client.request("http://proxy.test/v1/orders", {
    method: "POST", json: { order: 42 }, headers: { "idempotency-key": "order-42" },
  });
  assert.equal(res.key, "order-42");
  assert.deepEqual(sent.map((s) => s.key), ["order-42", "order-42"]);
});

test("a Retry-After that is neither delta-seconds nor an HTTP-date is ignored", () => {
  for (const v of ["-5", "1.5", "soon", ""]) {
    assert.equal(parseRetryAfter(v, Date.UTC(2026, 11, 6)), null, JSON.stringify(v));
  }
  assert.equal(parseRetryAfter("Sun, 06 Dec 2026 00:00:10 GMT", Date.UTC(2026, 11, 6)), 10_000);
});

test("the signal aborts an operation whose answer's problem body never ends", async () => {
  const ctrl = new AbortController();
  const fetch = async (url, init) => {
    // The headers came; the body stalls, until fetch's signal aborts it, as
    // fetch's own body does. The caller gives up meanwhile.
    setImmediate(() => ctrl.abort(new Error("user left")));
    const stalled = new ReadableStream({
      start(c) {
        init.signal.addEventListener("abort", () => c.error(init.signal.reason), { once: true });
      },
    });
    return new Response(stalled, {
      status: 503, headers: { "Content-Type": "application/problem+json" },
    });
  };
  const client = new IdempotentClient({ fetch, sleep, storage: "memory" });
  await assert.rejects(
    client.request("http://proxy.test/v1/orders", { method: "POST", body: "x", signal: ctrl.signal }),
    (err) => err instanceof GaveUpError && err.cause?.message === "user left",
  );
});

test("a Retry-After date is read as at most a day away, as delta-seconds are", () => {
  // setTimeout fires at once for a wait past 2^31 ms: a date decades off,
  // under a maxDelay above it, must not read as one.
  const now = Date.UTC(2026, 11, 6);
  for (const days of [2, 36500]) {
    assert.equal(parseRetryAfter(new Date(now + days * 86400_000).toUTCString(), now), 86400_000, `${days} days`);
  }
});

test("a body that cannot be sent keeps no key for its operation", async () => {
  const client = new IdempotentClient({ fetch: async () => assert.fail("nothing is sent"), sleep, storage: "memory" });
  const stream = new ReadableStream({ start(c) { c.close(); } });
  await assert.rejects(client.request("http://proxy.test/v1/orders", { method: "POST", body: stream, operation: "order-42" }), TypeError);
  const cyclic = {};
  cyclic.self = cyclic;
  await assert.rejects(client.request("http://proxy.test/v1/orders", { method: "POST", json: cyclic, operation: "order-42" }), TypeError);
  assert.equal(client.pending("order-42"), null, "no operation to resume: none was sent");
});

test("a Retry-After in asctime form is read in GMT, whatever the local zone", (t) => {
  const zone = process.env.TZ;
  t.after(() => {
    if (zone === undefined) delete process.env.TZ;
    else process.env.TZ = zone;
  });
  for (const tz of ["America/New_York", "Asia/Tokyo"]) {
    process.env.TZ = tz;
    // RFC 9110 section 5.6.7: the three forms of one instant, all in GMT.
    for (const v of ["Sun, 06 Dec 2026 00:00:10 GMT", "Sunday, 06-Dec-26 00:00:10 GMT", "Sun Dec  6 00:00:10 2026"]) {
      assert.equal(parseRetryAfter(v, Date.UTC(2026, 11, 6)), 10_000, `${tz} ${v}`);
    }
  }
});
