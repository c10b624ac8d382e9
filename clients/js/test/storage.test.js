// Where a named operation keeps its key.
import { test } from "node:test";
import assert from "node:assert/strict";
import { IdempotentClient, MemoryStorage } from "../idempotency.js";

test("without Web Storage (Node), keys are kept in memory", () => {
  for (const storage of [undefined, "session", "local", "memory"]) {
    assert.ok(new IdempotentClient({ storage }).storage instanceof MemoryStorage, String(storage));
  }
});

test("a Storage-like object is used as it is", () => {
  const storage = new MemoryStorage();
  const client = new IdempotentClient({ storage });
  assert.equal(client.storage, storage);
  storage.setItem("idempotency-key:op", JSON.stringify({ key: "k1" }));
  assert.equal(client.pending("op"), "k1");
  client.forget("op");
  assert.equal(client.pending("op"), null);
});

test("an unknown storage is refused", () => {
  assert.throws(() => new IdempotentClient({ storage: "cookie" }), TypeError);
});

test("a stored key that is not ours reads as none", () => {
  const storage = new MemoryStorage();
  storage.setItem("idempotency-key:op", "not json");
  assert.equal(new IdempotentClient({ storage }).pending("op"), null);
});
