package jsonread

import (
	"bytes"
	"encoding/json"
	"errors"
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
	out, err := AppendCanonical(nil, []byte(doc), ptrs)
	return string(out), err == nil
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
		// Upper case sorts before lower case: bytes, not folded names.
		{`{"b":1,"C":2}`, `{"C":2,"b":1}`},
	}
	// Enough members for the general sort.
	var in, want strings.Builder
	in.WriteString(`{`)
	want.WriteString(`{`)
	for i := range 40 {
		if i > 0 {
			in.WriteString(`,`)
			want.WriteString(`,`)
		}
		fmt.Fprintf(&in, `"m%02d":%d`, 39-i, 39-i)
		fmt.Fprintf(&want, `"m%02d":%d`, i, i)
	}
	in.WriteString(`}`)
	want.WriteString(`}`)
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
		{[]string{"/order/lines/0"}, `{"nonce":"n","order":{"id":7,"lines":[null,{"sku":"b","ts":2}],"trace":"t1"},"sent_at":"2026-01-01T00:00:00Z"}`},
		{[]string{"/order"}, `{"nonce":"n","sent_at":"2026-01-01T00:00:00Z"}`},
		{[]string{"/missing", "/order/id/x", "/sent_at/0"}, `{"nonce":"n","order":{"id":7,"lines":[{"sku":"a","ts":1},{"sku":"b","ts":2}],"trace":"t1"},"sent_at":"2026-01-01T00:00:00Z"}`},
	}
	for _, tc := range tests {
		got, ok := canonical(t, doc, tc.ignore...)
		if !ok || got != tc.want {
			t.Errorf("ignoring %q:\n got %s, %v\nwant %s", tc.ignore, got, ok, tc.want)
		}
	}
	// Names match decoded, and exactly: leaving out less keeps more.
	if got, _ := canonical(t, `{"\u0074":2,"k":3}`, "/t"); got != `{"k":3}` {
		t.Errorf("escaped ignored name: %s, want {\"k\":3}", got)
	}
	if got, _ := canonical(t, `{"T":2,"k":3}`, "/t"); got != `{"T":2,"k":3}` {
		t.Errorf("ignored name in another case: %s, want it kept", got)
	}
}

func TestCanonicalJSONRefusesWhatIsNotOneJSONText(t *testing.T) {
	deep := strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)
	for _, doc := range []string{``, ` `, `{`, `{"a":1}x`, `{"a":1} {}`, `{"a" 1}`, `[1,]`, `{"a":01}`, `'a'`, `a=1&b=2`, deep,
		"{\"\xff\":1,\"\\ufffd\":2}", // not UTF-8: read as a repeated name by encoding/json
	} {
		dst := []byte("prefix")
		out, err := AppendCanonical(dst, []byte(doc), nil)
		if err != ErrNotJSON || string(out) != "prefix" {
			t.Errorf("canonical(%.20q) = %q, %v; want ErrNotJSON with dst untouched", doc, out, err)
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

// A Go upstream reads {"amount":1,"Amount":2} as amount 2 and
// {"Amount":2,"amount":1} as amount 1 (encoding/json matches names
// case-insensitively, the last wins): no canonical form of either may
// stand for both, so both are refused, wherever the repeat is.
func TestCanonicalJSONRefusesCaseVariantNames(t *testing.T) {
	many := `{"z":0`
	for i := range 30 {
		many += fmt.Sprintf(`,"m%d":%d`, i, i)
	}
	for _, tc := range []struct {
		doc    string
		ignore []string
	}{
		{`{"amount":1,"Amount":2}`, nil},
		{`{"Amount":2,"amount":1}`, nil},
		{`{"a":1,"a":2}`, nil},
		{`{"a":1,"\u0061":2}`, nil},
		{`{"id":1,"\u0049D":2}`, nil},
		{`{"k":1,"` + "\u212a" + `":2}`, nil}, // the Kelvin sign folds to k
		{`{"s":1,"` + "\u017f" + `":2}`, nil}, // and the long s to s
		{`{"\ud800":1,"\ufffd":2}`, nil},      // a lone surrogate reads as U+FFFD
		{`[{"x":[{"deep":1,"DEEP":2}]}]`, nil},
		{many + `,"M29":1}`, nil},
		{`{"ts":1,"TS":2,"a":1}`, []string{"/ts"}},
		{`{"ts":{"a":1,"A":2},"b":1}`, []string{"/ts"}},
		{`{"items":[{"a":1,"A":2}]}`, []string{"/items/0"}},
	} {
		ptrs := make([]Pointer, len(tc.ignore))
		for i, s := range tc.ignore {
			ptrs[i] = mustPointer(t, s)
		}
		out, err := AppendCanonical([]byte("x"), []byte(tc.doc), ptrs)
		var dup *DuplicateNameError
		if !errors.As(err, &dup) || !errors.Is(err, ErrDuplicateName) || string(out) != "x" {
			t.Errorf("canonical(%.40s) ignoring %q = %q, %v; want a DuplicateNameError", tc.doc, tc.ignore, out, err)
		}
	}
	// Names that differ, however alike, are fine.
	for _, doc := range []string{`{"a":1,"b":2}`, `{"ab":1,"a b":2}`, `{"é":1,"e":2}`, `{"a":{"a":1},"b":{"a":2}}`, many + `}`} {
		if _, err := AppendCanonical(nil, []byte(doc), nil); err != nil {
			t.Errorf("canonical(%.40s): %v", doc, err)
		}
	}
}

// Ignoring an array element ignores its value, not its presence: an
// array keeps its length, so [] and ["x"] stay two bodies.
func TestCanonicalJSONIgnoresAnElementsValueNotItsPresence(t *testing.T) {
	ignore := []string{"/items/0"}
	empty, _ := canonical(t, `{"items":[]}`, ignore...)
	one, _ := canonical(t, `{"items":["x"]}`, ignore...)
	other, _ := canonical(t, `{"items":["y"]}`, ignore...)
	two, _ := canonical(t, `{"items":["x","y"]}`, ignore...)
	if empty == one {
		t.Errorf("[] and [\"x\"] both canonicalise to %s", one)
	}
	if one != other {
		t.Errorf("[\"x\"] is %s, [\"y\"] %s: want the ignored value left out", one, other)
	}
	if two != `{"items":[null,"y"]}` {
		t.Errorf("[\"x\",\"y\"] is %s, want {\"items\":[null,\"y\"]}", two)
	}
}

// A byte order mark before the text is read past (RFC 8259 §8.1) and
// kept in the canonical form, as sent: a Go upstream refuses the body
// that has one, so it is another body than the one without.
func TestCanonicalJSONKeepsAByteOrderMark(t *testing.T) {
	got, err := AppendCanonical(nil, []byte("\xef\xbb\xbf {\"b\":1,\"a\":2}"), nil)
	if err != nil || string(got) != "\xef\xbb\xbf{\"a\":2,\"b\":1}" {
		t.Errorf("with a BOM: %q, %v", got, err)
	}
	if _, err := AppendCanonical(nil, []byte("{\"a\":\"\xef\xbb\xbf\"}\xef\xbb\xbf"), nil); err != ErrNotJSON {
		t.Errorf("a BOM after the text: %v, want ErrNotJSON", err)
	}
}
