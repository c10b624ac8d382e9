# Reads base64 request bodies, one a line, as a Python upstream would
# (json.loads on the bytes: UTF-8, a byte order mark accepted), and prints
# one JSON line each: {"ok": parsed, "found": a value at the pointer,
# "kind": "str" | "int" | "other", "key": the value as text}.
import base64, json, sys

pointer = sys.argv[1].split("/")[1:]
for line in sys.stdin:
    body = base64.b64decode(line.strip())
    out = {"ok": False, "found": False, "kind": "", "key": ""}
    try:
        v = json.loads(body)
        out["ok"] = True
        for tok in pointer:
            if isinstance(v, dict) and tok in v:
                v = v[tok]
            elif isinstance(v, list) and tok.isdigit() and int(tok) < len(v) and (tok == "0" or tok[0] != "0"):
                v = v[int(tok)]
            else:
                raise KeyError(tok)
        out["found"] = True
        if isinstance(v, str):
            out["kind"], out["key"] = "str", v
        elif isinstance(v, int) and not isinstance(v, bool):
            out["kind"], out["key"] = "int", str(v)
        else:
            out["kind"] = "other"
    except (ValueError, KeyError, RecursionError, UnicodeDecodeError):
        pass
    print(json.dumps(out, ensure_ascii=True))
