// Reads base64 request bodies, one a line, as a Node upstream would
// (body-parser: UTF-8 decoded, a byte order mark stripped, then
// JSON.parse), and prints one JSON line each: {"ok", "found", "kind":
// "str" | "int" | "other", "key": the value as text, "exact": false for an
// integer beyond 2^53, which JavaScript holds only approximately}.
const readline = require("readline");
const pointer = process.argv[2].split("/").slice(1);
const rl = readline.createInterface({ input: process.stdin });
rl.on("line", (line) => {
  let text = Buffer.from(line.trim(), "base64").toString("utf8");
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  const out = { ok: false, found: false, kind: "", key: "", exact: true };
  try {
    let v = JSON.parse(text);
    out.ok = true;
    let found = true;
    for (const tok of pointer) {
      if (v !== null && typeof v === "object" && !Array.isArray(v) && Object.prototype.hasOwnProperty.call(v, tok)) {
        v = v[tok];
      } else if (Array.isArray(v) && /^(0|[1-9][0-9]*)$/.test(tok) && Number(tok) < v.length) {
        v = v[Number(tok)];
      } else {
        found = false;
        break;
      }
    }
    out.found = found;
    if (found && typeof v === "string") {
      out.kind = "str";
      out.key = v;
    } else if (found && typeof v === "number" && Number.isInteger(v)) {
      out.kind = "int";
      out.key = String(v === 0 ? 0 : BigInt(v));
      out.exact = Number.isSafeInteger(v);
    } else if (found) {
      out.kind = "other";
    }
  } catch (e) {}
  console.log(JSON.stringify(out));
});
