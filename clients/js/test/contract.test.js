// The client decides every answer as clients/contract.json does.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { decide, parseRetryAfter, newKey, PROBLEM_ACTIONS, PROBLEM_BASE } from "../idempotency.js";

const contractPath = process.env.IDEMPOTENCY_CONTRACT ?? fileURLToPath(new URL("../../contract.json", import.meta.url));
const contract = JSON.parse(readFileSync(contractPath, "utf8"));
const proxyRows = contract.problems.filter((p) => p.listeners.includes("proxy"));

test("every proxy problem type is decided as the contract says", () => {
  assert.equal(PROBLEM_BASE, contract.problem_base);
  assert.deepEqual(Object.keys(PROBLEM_ACTIONS).sort(), proxyRows.map((p) => p.type).sort());
  for (const row of proxyRows) {
    assert.equal(decide(row.status, contract.problem_base + row.type, false), row.client, row.type);
    assert.equal(decide(row.status, contract.problem_base + row.type, true), contract.other_answers.replayed, `replayed ${row.type}`);
  }
});

test("every other answer is decided by its status", () => {
  for (let status = 200; status < 600; status++) {
    const want = contract.other_answers.retry_statuses.includes(status) ? "retry" : contract.other_answers.otherwise;
    assert.equal(decide(status, "https://api.example/problems/x", false), want, `status ${status}`);
    assert.equal(decide(status, null, true), contract.other_answers.replayed, `replayed ${status}`);
  }
  for (let status = 300; status < 400; status++) {
    // handed over, never followed (redirect.test.js)
    assert.equal(decide(status, null, false), contract.other_answers.redirect, `redirect ${status}`);
  }
  assert.equal(contract.network_error, "retry");
  assert.equal(contract.attempt_timeout, "retry");
});

test("Retry-After is read in both forms", () => {
  const now = Date.parse("2026-11-29T08:00:00Z");
  assert.equal(parseRetryAfter("2", now), 2000);
  assert.equal(parseRetryAfter(" 120 ", now), 120000);
  assert.equal(parseRetryAfter(new Date(now + 3000).toUTCString(), now), 3000);
  assert.equal(parseRetryAfter(new Date(now - 60000).toUTCString(), now), 0);
  assert.equal(parseRetryAfter("soon", now), null);
  assert.equal(parseRetryAfter(null, now), null);
});

test("keys are UUIDv4", () => {
  const a = newKey();
  assert.match(a, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.notEqual(a, newKey());
});
