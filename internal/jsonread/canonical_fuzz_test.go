package jsonread

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

func FuzzCanonicalJSON(f *testing.F) {
	for _, doc := range []string{
		`{"b":1,"a":[true,null,{"d":"x","c":-1.5e3}]}`, `{"a":1,"a":2}`, `{"\u0061":1,"a":2}`,
		`[]`, `"\ud83d\ude00"`, `{"a":{"b":{"c":{}}}}`, `{"id":"evt_1","data":{"object":{"amount":100}}}`,
		`{"a" 1}`, `[1,2`, `x`, `{"amount":1,"Amount":2}`, `{"items":["x"]}`, "\xef\xbb\xbf{}",
	} {
		f.Add([]byte(doc), "/a")
	}
	f.Fuzz(func(t *testing.T, doc []byte, ptr string) {
		out, err := AppendCanonical(nil, doc, nil)
		checkVerdict(t, doc, err)
		if err != nil {
			return
		}
		// A byte order mark is kept as sent, and only then.
		text, cut := trimBOM(doc)
		outText, outCut := trimBOM(out)
		if cut != outCut {
			t.Fatalf("canonical(%q) = %q: the byte order mark is not kept as sent", doc, out)
		}
		if !json.Valid(outText) {
			t.Fatalf("canonical(%q) = %q, not JSON", doc, out)
		}
		again, err := AppendCanonical(nil, out, nil)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("canonical is not idempotent: %q → %q → %q", doc, out, again)
		}
		if a, b := decodeUseNumber(t, text), decodeUseNumber(t, outText); !reflect.DeepEqual(a, b) {
			t.Fatalf("canonical(%q) = %q reads differently: %v vs %v", doc, out, a, b)
		}
		mixed, _ := scramble(text, 0, nil)
		if got, err := AppendCanonical(nil, mixed, nil); err != nil || !bytes.Equal(got, outText) {
			t.Fatalf("reordered %q canonicalises to %q, the original %q to %q", mixed, got, doc, out)
		}

		p, err := ParsePointer(ptr)
		if err != nil || p.IsRoot() {
			return
		}
		ignore := []Pointer{p}
		less, err := AppendCanonical(nil, text, ignore)
		if err != nil || !json.Valid(less) {
			t.Fatalf("ignoring %q in %q: %q, %v", ptr, doc, less, err)
		}
		if again, err := AppendCanonical(nil, less, ignore); err != nil || !bytes.Equal(again, less) {
			t.Fatalf("ignoring %q is not idempotent: %q → %q", ptr, less, again)
		}
		if mixedLess, _ := AppendCanonical(nil, mixed, ignore); !bytes.Equal(mixedLess, less) {
			t.Fatalf("ignoring %q: reordered %q gives %q, the original %q", ptr, mixed, mixedLess, less)
		}
		// What the pointer named is gone, or, an array element, null.
		tree, _ := readTree(t, less)
		if v, found := resolve(tree, p.tokens, false); found && v != nil {
			t.Fatalf("ignoring %q in %q left %v in %q", ptr, doc, v, less)
		}
		if n := p.index[len(p.index)-1]; n >= 0 {
			before, _ := readTree(t, text)
			if parent, ok := resolve(before, p.tokens[:len(p.tokens)-1], false); ok {
				if a, isArray := parent.(array); isArray {
					after, _ := resolve(tree, p.tokens[:len(p.tokens)-1], false)
					if b, _ := after.(array); len(b) != len(a) {
						t.Fatalf("ignoring %q in %q: the array's length went from %d to %d in %q", ptr, doc, len(a), len(b), less)
					}
				}
			}
		}
	})
}
