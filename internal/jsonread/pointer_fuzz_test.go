package jsonread

import (
	"errors"
	"reflect"
	"testing"
	"unicode/utf8"
)

// FuzzFind compares Find with encoding/json's reading of the same body:
// the scanner takes a body for JSON exactly when encoding/json does (up to
// UTF-8 and MaxDepth), refuses it exactly when encoding/json would match
// two of its names to one struct field, and otherwise finds the value a Go
// struct field gets — which is also the value a Go map, Python's json and
// JavaScript's JSON.parse get whenever they find one.
func FuzzFind(f *testing.F) {
	f.Add([]byte(`{"id":"evt_1"}`), "/id")
	f.Add([]byte(`{"a":{"x":[1,{}],"b":{"order_id":12}}}`), "/a/b/order_id")
	f.Add([]byte(`{"items":["x","y"]}`), "/items/1")
	f.Add([]byte(`{"id":"\u00e9","id":2}`), "/id")
	f.Add([]byte(`{"id":"ord_5","ID":"ord_7"}`), "/id")
	f.Add([]byte(`{"ID":"ord_7"}`), "/id")
	f.Add([]byte("{\"\u212a\":1,\"k\":2}"), "/k")
	f.Add([]byte("\xef\xbb\xbf{\"id\":-0}"), "/id")
	f.Add([]byte(`{"a~b":{"c/d":[true]}}`), "/a~0b/c~1d/0")
	f.Fuzz(func(t *testing.T, doc []byte, ptr string) {
		p, err := ParsePointer(ptr)
		if err != nil {
			return
		}
		v, err := p.Find(doc)
		checkVerdict(t, doc, err)
		text, _ := trimBOM(doc)
		tree, ok := readTree(t, text)
		if !ok || !utf8.Valid(text) || jsonDepth(text) > MaxDepth || repeatsName(tree) {
			return
		}
		want, found := resolve(tree, p.tokens, true)
		if found != (err == nil) {
			t.Fatalf("%s in %q: %q, %v; encoding/json finds %v (%v)", p, doc, v, err, want, found)
		}
		if !found {
			return
		}
		got, _ := readTree(t, v)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s in %q: %q, encoding/json reads %v", p, doc, v, want)
		}
		if exact, ok := resolve(tree, p.tokens, false); ok && !reflect.DeepEqual(exact, got) {
			t.Fatalf("%s in %q: %q, a map reads %v", p, doc, v, exact)
		}
	})
}

// checkVerdict asserts that err, what Find or AppendCanonical said of doc,
// is Validate's verdict and encoding/json's: ErrNotJSON exactly for what
// it does not take as one JSON text in UTF-8 within MaxDepth, a
// *DuplicateNameError exactly when two names of an object fold alike.
func checkVerdict(t *testing.T, doc []byte, err error) {
	t.Helper()
	if verr := Validate(doc); !errors.Is(err, ErrNotJSON) && !errors.Is(err, ErrDuplicateName) && verr != nil ||
		errors.Is(err, ErrNotJSON) != errors.Is(verr, ErrNotJSON) || errors.Is(err, ErrDuplicateName) != errors.Is(verr, ErrDuplicateName) {
		t.Fatalf("%q: %v, but Validate says %v", doc, err, verr)
	}
	text, _ := trimBOM(doc)
	tree, ok := readTree(t, text)
	isJSON := ok && utf8.Valid(text) && jsonDepth(text) <= MaxDepth
	if errors.Is(err, ErrNotJSON) == isJSON {
		t.Fatalf("%q: %v, but encoding/json takes it for JSON: %v", doc, err, isJSON)
	}
	if isJSON && errors.Is(err, ErrDuplicateName) != repeatsName(tree) {
		t.Fatalf("%q: %v, but encoding/json repeats a name: %v", doc, err, repeatsName(tree))
	}
	var dup *DuplicateNameError
	if errors.Is(err, ErrDuplicateName) && !errors.As(err, &dup) {
		t.Fatalf("%q: %v is no *DuplicateNameError", doc, err)
	}
}

// FuzzValidate checks Validate alone against encoding/json.
func FuzzValidate(f *testing.F) {
	for _, doc := range []string{`{"a":1,"A":2}`, `[{"x":{}}]`, `{"\u00e9":1,"\u00c9":2}`, "\xef\xbb\xbf[]", `{"a":01}`} {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		checkVerdict(t, doc, Validate(doc))
	})
}
