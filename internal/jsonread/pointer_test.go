package jsonread

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseJSONPointerUnescapesTokens(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"/", []string{""}},
		{"/id", []string{"id"}},
		{"/a/b/order_id", []string{"a", "b", "order_id"}},
		{"/a~1b", []string{"a/b"}},
		{"/m~0n", []string{"m~n"}},
		{"/~01", []string{"~1"}}, // ~0 first, then a plain 1: not "/"
		{"/items/0", []string{"items", "0"}},
	}
	for _, tc := range tests {
		p, err := ParsePointer(tc.in)
		if err != nil {
			t.Errorf("ParsePointer(%q): %v", tc.in, err)
			continue
		}
		if !slices.Equal(p.tokens, tc.want) || p.String() != tc.in {
			t.Errorf("ParsePointer(%q) = %q (%q), want %q", tc.in, p.tokens, p.String(), tc.want)
		}
	}
}

func TestParseJSONPointerRejectsBadSyntax(t *testing.T) {
	for in, want := range map[string]string{
		"id":    `must start with "/"`,
		"/a~2":  `"~" must be followed by 0`,
		"/a~":   `"~" must be followed by 0`,
		"/a/b~": `"~" must be followed by 0`,
	} {
		_, err := ParsePointer(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParsePointer(%q) error = %v, want one containing %q", in, err, want)
		}
	}
}

func TestJSONPointerArrayIndexes(t *testing.T) {
	for tok, want := range map[string]int{"0": 0, "7": 7, "10": 10, "01": -1, "-": -1, "": -1, "1e2": -1, "9999999999": -1} {
		if got := arrayIndex(tok); got != want {
			t.Errorf("arrayIndex(%q) = %d, want %d", tok, got, want)
		}
	}
}

func TestJSONPointerLookup(t *testing.T) {
	doc := `{"a/b": 1, "m~n": 2, "esc\u002fd": 3, "items": [ {"id": "x"}, {"id": "y"} ],
		"0": "zero", "Case": "c", "": "empty", "nested": {"deep": {"v": [true, null]}}}`
	tests := []struct{ ptr, want string }{
		{"", strings.TrimSpace(doc)},
		{"/a~1b", "1"},
		{"/m~0n", "2"},
		{"/esc~1d", "3"}, // the member name is decoded before it is compared
		{"/items/1/id", `"y"`},
		{"/items/0", `{"id": "x"}`},
		{"/0", `"zero"`}, // an index token names a member of an object
		{"/case", `"c"`}, // names match case-insensitively, as a Go upstream reads them
		{"/CASE", `"c"`},
		{"/", `"empty"`},
		{"/nested/deep/v/1", "null"},
	}
	for _, tc := range tests {
		p, err := ParsePointer(tc.ptr)
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.Find([]byte(doc))
		if err != nil || string(got) != tc.want {
			t.Errorf("Find(%q) = %q, %v; want %q", tc.ptr, got, err, tc.want)
		}
	}
	for _, ptr := range []string{"/missing", "/items/2", "/items/-", "/items/01", "/a~1b/x", "/items/x", "/nested/deep/v/2"} {
		p, _ := ParsePointer(ptr)
		if got, err := p.Find([]byte(doc)); err != ErrNotFound {
			t.Errorf("Find(%q) = %q, %v; want ErrNotFound", ptr, got, err)
		}
	}
}

// The scanner accepts exactly the JSON texts encoding/json accepts, up to
// the nesting bound and UTF-8 (TestValidateWantsOneJSONTextInUTF8).
func TestValidateAgreesWithEncodingJSON(t *testing.T) {
	for _, doc := range []string{
		`{}`, `[]`, `""`, `0`, `-0`, `1.5e+3`, `true`, `null`, ` {"a" : [1, "b", {}]} `,
		`"\u00e9\ud83d\ude00\n"`, `"\ud800"`, `{"a":1,}`, `[1,]`, `01`, `1.`, `.5`, `1e`, `-`, `+1`,
		`"\x"`, `"a` + "\x01" + `"`, `"\u12"`, `{"a" 1}`, `{1:2}`, `[1 2]`, `tru`, `nul`, `"abc`,
		`{"a":1}}`, `[1]]`, `{"a":{"b":[]}}`, `1 2`, ``, ` `,
	} {
		got := Validate([]byte(doc)) == nil
		if want := json.Valid([]byte(doc)); got != want {
			t.Errorf("scanner on %q: valid = %v, encoding/json says %v", doc, got, want)
		}
	}
}

func TestScannerBoundsNesting(t *testing.T) {
	ok := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	if Validate([]byte(ok)) != nil {
		t.Errorf("%d nested arrays refused", MaxDepth)
	}
	deep := "[" + ok + "]"
	if Validate([]byte(deep)) != ErrNotJSON {
		t.Errorf("%d nested arrays accepted", MaxDepth+1)
	}
}

func TestAppendUnescapedDecodesLikeEncodingJSON(t *testing.T) {
	for _, s := range []string{`plain`, `a\"b\\c\/d`, `\b\f\n\r\t`, `\u00e9`, `\ud83d\ude00`, `\ud800`, `\ud800x`, `\ud800\u0041`, `\udc00\ud800`} {
		var want string
		if err := json.Unmarshal([]byte(`"`+s+`"`), &want); err != nil {
			t.Fatal(err)
		}
		if got := string(appendUnescaped(nil, []byte(s))); got != want {
			t.Errorf("appendUnescaped(%q) = %q, want %q", s, got, want)
		}
	}
}

func TestValidateWantsOneJSONTextInUTF8(t *testing.T) {
	deep := strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)
	for doc, want := range map[string]bool{
		`{"a":[1,"b",{}]}`: true, ` 1 `: true, `"\ud800"`: true,
		``: false, `{"a":1} {}`: false, `[1,]`: false, "\"\xff\"": false, deep: false,
	} {
		if err := Validate([]byte(doc)); (err == nil) != want || err != nil && err != ErrNotJSON {
			t.Errorf("Validate(%.20q) = %v, want valid %v", doc, err, want)
		}
	}
}

// A key is read from a body only when the whole body is one JSON text:
// what follows the value counts, and 01 is not a number.
func TestFindReadsTheWholeBody(t *testing.T) {
	p := mustPointer(t, "/id")
	for _, doc := range []string{`{"id":"evt_1", this is not JSON`, `{"id":01}`, `{"id":1} {"id":2}`, `{"id":"x"}]`, "{\"id\":\"x\",\"a\":\"\xff\"}"} {
		if v, err := p.Find([]byte(doc)); err != ErrNotJSON {
			t.Errorf("Find in %.30q = %q, %v; want ErrNotJSON", doc, v, err)
		}
	}
	if v, err := p.Find([]byte("\xef\xbb\xbf{\"id\":\"evt_1\"}")); err != nil || string(v) != `"evt_1"` {
		t.Errorf("after a byte order mark: %q, %v; want \"evt_1\"", v, err)
	}
}

// {"id":"ord_1","id":"ord_9"} is ord_9 to Go, Python and JavaScript and
// ord_1 to a reader that keeps the first; {"id":"ord_5","ID":"ord_7"} is
// ord_7 to a Go upstream. Find gives no value for either.
func TestFindRefusesRepeatedNames(t *testing.T) {
	p := mustPointer(t, "/id")
	for _, doc := range []string{`{"id":"ord_1","id":"ord_9"}`, `{"id":"ord_5","ID":"ord_7"}`, `{"id":"x","other":{"a":1,"A":2}}`, `{"other":[{"a":1,"a":2}],"id":"x"}`} {
		v, err := p.Find([]byte(doc))
		var dup *DuplicateNameError
		if !errors.As(err, &dup) {
			t.Errorf("Find in %s = %q, %v; want a DuplicateNameError", doc, v, err)
		}
	}
	_, err := p.Find([]byte(`{"id":"ord_5", "ID":"ord_7"}`))
	if want := `the member name "ID" repeats in an object at byte 15 (names are compared case-insensitively)`; err == nil || err.Error() != want {
		t.Errorf("error %v, want %s", err, want)
	}
}

// Names fold as encoding/json folds them to match struct fields, which is
// bytes.EqualFold.
func TestNamesFoldAsBytesEqualFold(t *testing.T) {
	words := []string{"id", "ID", "Id", "k", "K", "\u212a", "s", "S", "\u017f", "ß", "ẞ", "σ", "Σ", "ς", "é", "É", "e", "ǅ", "ǆ", "Ǆ", "i", "İ", "ı", "\ufffd", "a b", "ab"}
	for _, a := range words {
		for _, b := range words {
			got := string(appendFolded(nil, []byte(a))) == string(appendFolded(nil, []byte(b)))
			if want := bytes.EqualFold([]byte(a), []byte(b)); got != want {
				t.Errorf("%q and %q fold alike: %v, bytes.EqualFold says %v", a, b, got, want)
			}
		}
	}
}
