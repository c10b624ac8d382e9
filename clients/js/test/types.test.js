// idempotency.d.ts declares exactly what idempotency.js exports.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import * as mod from "../idempotency.js";

test("the declarations name every export and nothing else", () => {
  const dts = readFileSync(new URL("../idempotency.d.ts", import.meta.url), "utf8");
  const declared = [...dts.matchAll(/^export declare (?:class|function|const) (\w+)/gm)].map((m) => m[1]).sort();
  assert.deepEqual(declared, Object.keys(mod).sort());
});
