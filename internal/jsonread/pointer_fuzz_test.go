package jsonread

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"
	"unicode/utf8"
)

// FuzzFind compares Find with a resolution of the pointer over
// encoding/json's tokens, on bodies that are JSON throughout.
func FuzzFind(f *testing.F) {
	f.Add([]byte(`{"id":"evt_1"}`), "/id")
	f.Add([]byte(`{"a":{"x":[1,{}],"b":{"order_id":12}}}`), "/a/b/order_id")
	f.Add([]byte(`{"items":["x","y"]}`), "/items/1")
	f.Add([]byte(`{"id":"\u00e9","id":2}`), "/id")
	f.Add([]byte(`{"a~b":{"c/d":[true]}}`), "/a~0b/c~1d/0")
	f.Fuzz(func(t *testing.T, doc []byte, ptr string) {
		p, err := ParsePointer(ptr)
		if err != nil {
			return
		}
		v, found := p.Find(doc)
		// encoding/json reads invalid UTF-8 as U+FFFD; the scanner
		// compares member names byte for byte.
		if !json.Valid(doc) || !utf8.Valid(doc) || jsonDepth(doc) > MaxDepth {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber()
		want, wantFound := resolveTokens(t, dec, p.tokens)
		if found != wantFound {
			t.Fatalf("%s in %q: found %q = %v, encoding/json %v", p, doc, v, found, wantFound)
		}
		if !found {
			return
		}
		if !json.Valid(v) {
			t.Fatalf("%s in %q: %q is not a JSON value", p, doc, v)
		}
		if got := decodeUseNumber(t, v); want != nil && !equalJSON(got, want) {
			t.Fatalf("%s in %q: %q, encoding/json reads %v", p, doc, v, want)
		}
	})
}

// equalJSON compares two scalars decoded with UseNumber.
func equalJSON(a, b any) bool { return a == b }

// resolveTokens follows tokens through the value dec is at, taking the
// first member of a repeated name, and returns the scalar found there.
func resolveTokens(t *testing.T, dec *json.Decoder, tokens []string) (any, bool) {
	t.Helper()
	tok, err := dec.Token()
	if err != nil {
		t.Fatal(err)
	}
	if len(tokens) == 0 {
		if d, ok := tok.(json.Delim); ok {
			skipTokens(t, dec, d)
			return nil, true
		}
		return tok, true
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil, false
	}
	n := arrayIndex(tokens[0])
	for i := 0; dec.More(); i++ {
		match := false
		if d == '{' {
			name, _ := dec.Token()
			match = name.(string) == tokens[0]
		} else {
			match = i == n
		}
		if match {
			return resolveTokens(t, dec, tokens[1:]) // the rest is not read
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil && err != io.EOF {
			t.Fatal(err)
		}
	}
	return nil, false
}

func skipTokens(t *testing.T, dec *json.Decoder, open json.Delim) {
	for depth := 1; depth > 0; {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
}
