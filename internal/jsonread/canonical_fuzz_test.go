package jsonread

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"
)

func FuzzCanonicalJSON(f *testing.F) {
	for _, doc := range []string{
		`{"b":1,"a":[true,null,{"d":"x","c":-1.5e3}]}`, `{"a":1,"a":2}`, `{"\u0061":1,"a":2}`,
		`[]`, `"\ud83d\ude00"`, `{"a":{"b":{"c":{}}}}`, `{"id":"evt_1","data":{"object":{"amount":100}}}`,
		`{"a" 1}`, `[1,2`, `x`,
	} {
		f.Add([]byte(doc), "/a")
	}
	f.Fuzz(func(t *testing.T, doc []byte, ptr string) {
		out, ok := AppendCanonical(nil, doc, nil)
		valid := json.Valid(doc) && utf8.Valid(doc) && jsonDepth(doc) <= MaxDepth
		if ok != valid {
			t.Fatalf("canonical(%q) ok = %v, but valid = %v", doc, ok, valid)
		}
		if !ok {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("canonical(%q) = %q, not JSON", doc, out)
		}
		again, ok := AppendCanonical(nil, out, nil)
		if !ok || !bytes.Equal(again, out) {
			t.Fatalf("canonical is not idempotent: %q → %q → %q", doc, out, again)
		}
		if a, b := decodeUseNumber(t, doc), decodeUseNumber(t, out); !reflect.DeepEqual(a, b) {
			t.Fatalf("canonical(%q) = %q reads differently: %v vs %v", doc, out, a, b)
		}
		mixed, _ := scramble(doc, 0, nil)
		if got, ok := AppendCanonical(nil, mixed, nil); !ok || !bytes.Equal(got, out) {
			t.Fatalf("reordered %q canonicalises to %q, the original %q to %q", mixed, got, doc, out)
		}

		p, err := ParsePointer(ptr)
		if err != nil || p.IsRoot() {
			return
		}
		ignore := []Pointer{p}
		less, ok := AppendCanonical(nil, doc, ignore)
		if !ok || !json.Valid(less) {
			t.Fatalf("ignoring %q in %q: %q, %v", ptr, doc, less, ok)
		}
		if again, ok := AppendCanonical(nil, less, ignore); !ok || !bytes.Equal(again, less) {
			t.Fatalf("ignoring %q is not idempotent: %q → %q", ptr, less, again)
		}
		if mixedLess, _ := AppendCanonical(nil, mixed, ignore); !bytes.Equal(mixedLess, less) {
			t.Fatalf("ignoring %q: reordered %q gives %q, the original %q", ptr, mixed, mixedLess, less)
		}
		for _, n := range p.index {
			if n >= 0 {
				return // removing an element renumbers the ones after it
			}
		}
		if v, found := p.Find(less); found {
			t.Fatalf("ignoring %q in %q left %q in %q", ptr, doc, v, less)
		}
	})
}
