package jsonread

import (
	"bytes"
	"encoding/json"
	"testing"
)

// What encoding/json reads, as the reference the fuzz targets compare the
// scanner with: a tree that keeps every member in order, so that repeated
// names and which of them a reader takes can be asked about.

type member struct {
	name  string
	value any
}

type object []member

type array []any

// readTree decodes doc with encoding/json (numbers as json.Number), or
// reports false when encoding/json does not take doc as one JSON text.
func readTree(t *testing.T, doc []byte) (any, bool) {
	t.Helper()
	if !json.Valid(doc) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	return treeValue(t, dec), true
}

func treeValue(t *testing.T, dec *json.Decoder) any {
	tok, err := dec.Token()
	if err != nil {
		t.Fatal(err)
	}
	switch tok {
	case json.Delim('{'):
		o := object{}
		for dec.More() {
			name, err := dec.Token()
			if err != nil {
				t.Fatal(err)
			}
			o = append(o, member{name.(string), treeValue(t, dec)})
		}
		dec.Token()
		return o
	case json.Delim('['):
		a := array{}
		for dec.More() {
			a = append(a, treeValue(t, dec))
		}
		dec.Token()
		return a
	}
	return tok
}

// repeatsName reports whether an object in v has two names that
// bytes.EqualFold takes for one, as encoding/json does for struct fields.
func repeatsName(v any) bool {
	switch v := v.(type) {
	case object:
		for i, a := range v {
			for _, b := range v[:i] {
				if bytes.EqualFold([]byte(a.name), []byte(b.name)) {
					return true
				}
			}
			if repeatsName(a.value) {
				return true
			}
		}
	case array:
		for _, e := range v {
			if repeatsName(e) {
				return true
			}
		}
	}
	return false
}

// resolve follows tokens through v as a reader that keeps the last of a
// repeated name: matching names exactly (a Go map, Python's dict,
// JavaScript's JSON.parse) or case-insensitively (a Go struct field).
func resolve(v any, tokens []string, fold bool) (any, bool) {
	for _, tok := range tokens {
		switch c := v.(type) {
		case object:
			found := false
			for _, m := range c {
				if m.name == tok || fold && bytes.EqualFold([]byte(m.name), []byte(tok)) {
					v, found = m.value, true
				}
			}
			if !found {
				return nil, false
			}
		case array:
			n := arrayIndex(tok)
			if n < 0 || n >= len(c) {
				return nil, false
			}
			v = c[n]
		default:
			return nil, false
		}
	}
	return v, true
}
