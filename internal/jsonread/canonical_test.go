package jsonread

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func canonical(t testing.TB, doc string, ignore ...string) (string, bool) {
	t.Helper()
	ptrs := make([]Pointer, len(ignore))
	for i, s := range ignore {
		p, err := ParsePointer(s)
		if err != nil {
			t.Fatal(err)
		}
		ptrs[i] = p
	}
	out, ok := AppendCanonical(nil, []byte(doc), ptrs)
	return string(out), ok
}

func TestCanonicalJSONSortsMembersAndDropsWhitespace(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{}`, `{}`},
		{` [ ] `, `[]`},
		{`"s"`, `"s"`},
		{` 12 `, `12`},
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{"{\n  \"z\": [3, 2, 1],\n  \"a\": {\"y\": true, \"x\": null}\n}", `{"a":{"x":null,"y":true},"z":[3,2,1]}`},
		{`[{"b":1,"a":2},{"d":3,"c":4}]`, `[{"a":2,"b":1},{"c":4,"d":3}]`},
		{`{"aa":1,"a":2,"":3,"B":4}`, `{"":3,"B":4,"a":2,"aa":1}`},
		// Tokens as sent: no number or string is rewritten.
		{`{"n":1.0,"m":1E+2,"s":"\u00e9\/"}`, `{"m":1E+2,"n":1.0,"s":"\u00e9\/"}`},
		// Names are ordered decoded ("\u0062" is "b"), written as sent.
		{`{"\u0062":1,"a":2,"c":3}`, `{"a":2,"\u0062":1,"c":3}`},
		// A repeated name keeps the order its members came in.
		{`{"b":0,"a":1,"a":2}`, `{"a":1,"a":2,"b":0}`},
		{`{"a":2,"a":1}`, `{"a":2,"a":1}`},
		{`{"a":1,"\u0061":2}`, `{"a":1,"\u0061":2}`},
		{`{"\u0061":2,"a":1}`, `{"\u0061":2,"a":1}`},
	}
	// Enough repeats that an unstable sort would show.
	var in, want strings.Builder
	in.WriteString(`{"z":0`)
	want.WriteString(`{`)
	for i := range 40 {
		fmt.Fprintf(&in, `,"a":%d,"m":%d`, i, i)
		fmt.Fprintf(&want, `"a":%d,`, i)
	}
	for i := range 40 {
		fmt.Fprintf(&want, `"m":%d,`, i)
	}
	in.WriteString(`}`)
	want.WriteString(`"z":0}`)
	tests = append(tests, struct{ in, want string }{in.String(), want.String()})
	for _, tc := range tests {
		got, ok := canonical(t, tc.in)
		if !ok || got != tc.want {
			t.Errorf("canonical(%s) = %s, %v; want %s", tc.in, got, ok, tc.want)
		}
	}
}

func TestCanonicalJSONLeavesOutIgnoredMembers(t *testing.T) {
	doc := `{"sent_at":"2026-01-01T00:00:00Z","order":{"id":7,"trace":"t1","lines":[{"sku":"a","ts":1},{"sku":"b","ts":2}]},"nonce":"n"}`
	tests := []struct {
		ignore []string
		want   string
	}{
		{[]string{"/sent_at"}, `{"nonce":"n","order":{"id":7,"lines":[{"sku":"a","ts":1},{"sku":"b","ts":2}],"trace":"t1"}}`},
		{[]string{"/sent_at", "/nonce", "/order/trace"}, `{"order":{"id":7,"lines":[{"sku":"a","ts":1},{"sku":"b","ts":2}]}}`},
		{[]string{"/order/lines/1/ts"}, `{"nonce":"n","order":{"id":7,"lines":[{"sku":"a","ts":1},{"sku":"b"}],"trace":"t1"},"sent_at":"2026-01-01T00:00:00Z"}`},
		{[]string{"/order/lines/0"}, `{"nonce":"n","order":{"id":7,"lines":[{"sku":"b","ts":2}],"trace":"t1"},"sent_at":"2026-01-01T00:00:00Z"}`},
		{[]string{"/order"}, `{"nonce":"n","sent_at":"2026-01-01T00:00:00Z"}`},
		{[]string{"/missing", "/order/id/x", "/sent_at/0"}, `{"nonce":"n","order":{"id":7,"lines":[{"sku":"a","ts":1},{"sku":"b","ts":2}],"trace":"t1"},"sent_at":"2026-01-01T00:00:00Z"}`},
	}
	for _, tc := range tests {
		got, ok := canonical(t, doc, tc.ignore...)
		if !ok || got != tc.want {
			t.Errorf("ignoring %q:\n got %s, %v\nwant %s", tc.ignore, got, ok, tc.want)
		}
	}
	// Every member with an ignored name goes, and names match decoded.
	if got, _ := canonical(t, `{"t":1,"\u0074":2,"k":3}`, "/t"); got != `{"k":3}` {
		t.Errorf("repeated ignored name: %s, want {\"k\":3}", got)
	}
}

func TestCanonicalJSONRefusesWhatIsNotOneJSONText(t *testing.T) {
	deep := strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)
	for _, doc := range []string{``, ` `, `{`, `{"a":1}x`, `{"a":1} {}`, `{"a" 1}`, `[1,]`, `{"a":01}`, `'a'`, `a=1&b=2`, deep,
		"{\"\xff\":1,\"\\ufffd\":2}", // not UTF-8: read as a repeated name by encoding/json
	} {
		dst := []byte("prefix")
		out, ok := AppendCanonical(dst, []byte(doc), nil)
		if ok || string(out) != "prefix" {
			t.Errorf("canonical(%.20q) = %q, %v; want refused with dst untouched", doc, out, ok)
		}
	}
}

func mustPointer(t testing.TB, s string) Pointer {
	t.Helper()
	p, err := ParsePointer(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// scramble rewrites a valid JSON text with every object's members in
// reverse order (unless a name repeats: then order carries meaning) and
// whitespace between all tokens: a document every JSON reader reads as the
// same, which must canonicalise alike.
func scramble(b []byte, i int, out []byte) ([]byte, int) {
	i = skipWS(b, i)
	switch b[i] {
	case '{':
		type member struct{ name, value []byte }
		var ms []member
		seen := map[string]bool{}
		repeated := false
		if i = skipWS(b, i+1); b[i] == '}' {
			return append(out, "{ }"...), i + 1
		}
		for {
			end := scanString(b, i)
			name := string(appendUnescaped(nil, b[i+1:end-1]))
			repeated = repeated || seen[name]
			seen[name] = true
			m := member{name: b[i:end]}
			m.value, i = scramble(b, skipWS(b, end)+1, nil)
			ms = append(ms, m)
			if i = skipWS(b, i); b[i] == '}' {
				i++
				break
			}
			i++
		}
		if !repeated {
			for l, r := 0, len(ms)-1; l < r; l, r = l+1, r-1 {
				ms[l], ms[r] = ms[r], ms[l]
			}
		}
		out = append(out, "{\n\t"...)
		for j, m := range ms {
			if j > 0 {
				out = append(out, " ,\r\n "...)
			}
			out = append(append(append(out, m.name...), " : "...), m.value...)
		}
		return append(out, "\n}"...), i
	case '[':
		out = append(out, "[ "...)
		if i = skipWS(b, i+1); b[i] == ']' {
			return append(out, "]"...), i + 1
		}
		for first := true; ; first = false {
			if !first {
				out = append(out, " , "...)
			}
			out, i = scramble(b, i, out)
			if i = skipWS(b, i); b[i] == ']' {
				return append(out, " ]"...), i + 1
			}
			i = skipWS(b, i+1)
		}
	}
	end := scanScalar(b, i)
	return append(out, b[i:end]...), end
}

// jsonDepth is the deepest nesting of containers in a valid JSON text.
func jsonDepth(doc []byte) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(doc); i++ {
		switch c := doc[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

func decodeUseNumber(t *testing.T, doc []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decoding %q: %v", doc, err)
	}
	return v
}
