package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func FuzzKeySources(f *testing.F) {
	f.Add("json:/id", "k", "key=a", []byte(`{"id":"evt_1"}`))
	f.Add("json:/a/b/order_id", `"k"`, "key=a&key=b", []byte(`{"a":{"x":[1,{}],"b":{"order_id":12}}}`))
	f.Add("json:/items/1", "a, b", "k%65y=%41", []byte(`{"items":["x","y"]}`))
	f.Add("query:key", "", "key=a+b%2F", []byte(`{"id":1.5}`))
	f.Add("header:Idempotency-Key", `"a\"b"`, "", []byte(`{"id":"\u00e9"}`))
	f.Add("body_sha256", "k", "", []byte("payload"))
	f.Fuzz(func(t *testing.T, spec, header, rawQuery string, body []byte) {
		src, err := ParseKeySource(spec)
		if err != nil {
			return
		}
		if again, err := ParseKeySource(src.String()); err != nil || again.String() != src.String() {
			t.Fatalf("%q → %q does not parse back: %v", spec, src, err)
		}
		r := &http.Request{Header: http.Header{}, URL: &url.URL{RawQuery: rawQuery}}
		if src.Kind == KeyFromHeader {
			r.Header[src.Name] = []string{header}
		}
		key, err := requestKey(r, []KeySource{src}, body, true)
		if err == nil {
			if checkKey(key) != nil {
				t.Fatalf("%s accepted an invalid key %q", src, key)
			}
		} else if err != errNoKey && !errors.As(err, new(*keySourceError)) {
			t.Fatalf("%s: unexpected error %v", src, err)
		}
		switch src.Kind {
		case KeyFromHeader:
			want, werr := parseKey(r.Header, src.Name)
			if key != want || !errors.Is(err, werr) {
				t.Fatalf("header source: %q, %v; parseKey: %q, %v", key, err, want, werr)
			}
		case KeyFromQuery:
			checkQueryKey(t, rawQuery, src.Name, key, err)
		case KeyFromJSON:
			checkJSONKey(t, body, src.Pointer, key, err)
		case KeyFromBodySHA256:
			if (err == errNoKey) != (len(body) == 0) || err == nil && key != bodyHex(body) {
				t.Fatalf("body_sha256 of %q: %q, %v", body, key, err)
			}
		}
	})
}

// checkQueryKey compares a query source's answer with url.ParseQuery's,
// where the two agree on the syntax (it drops pairs with a semicolon).
func checkQueryKey(t *testing.T, rawQuery, name, key string, err error) {
	t.Helper()
	values, perr := url.ParseQuery(rawQuery)
	if perr != nil {
		return
	}
	switch vs := values[name]; {
	case len(vs) == 0:
		if err != errNoKey {
			t.Fatalf("query %q: %q, %v; want absent", rawQuery, key, err)
		}
	case len(vs) > 1:
		if !errors.Is(err, errKeyMultiple) {
			t.Fatalf("query %q: %q, %v; want errKeyMultiple", rawQuery, key, err)
		}
	case checkKey(vs[0]) == nil:
		if err != nil || key != vs[0] {
			t.Fatalf("query %q: %q, %v; want %q", rawQuery, key, err, vs[0])
		}
	default:
		if err == nil {
			t.Fatalf("query %q: accepted %q", rawQuery, key)
		}
	}
}

// checkJSONKey compares a json source's answer with a resolution of the
// pointer over encoding/json's tokens, on bodies that are JSON throughout.
func checkJSONKey(t *testing.T, body []byte, p JSONPointer, key string, err error) {
	t.Helper()
	// encoding/json reads invalid UTF-8 as U+FFFD; the scanner compares
	// member names byte for byte.
	if !json.Valid(body) || !utf8.Valid(body) || jsonDepth(body) > maxJSONDepth {
		return
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	v, found := resolveTokens(t, dec, p.tokens)
	want := ""
	switch v := v.(type) {
	case string:
		want = v
	case json.Number:
		if _, perr := strconv.ParseInt(string(v), 10, 64); perr == nil && !strings.ContainsAny(string(v), ".eE") {
			want = string(v)
		} else {
			found = false
		}
	default:
		found = false
	}
	switch {
	case !found:
		if err != errNoKey {
			t.Fatalf("%s in %q: %q, %v; want absent", p, body, key, err)
		}
	case checkKey(want) == nil:
		if err != nil || key != want {
			t.Fatalf("%s in %q: %q, %v; want %q", p, body, key, err, want)
		}
	default:
		if err == nil || err == errNoKey {
			t.Fatalf("%s in %q: %q, %v; want invalid-key for %q", p, body, key, err, want)
		}
	}
}

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
