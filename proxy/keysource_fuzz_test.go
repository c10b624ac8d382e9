package proxy

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/jsonread"
)

func FuzzKeySources(f *testing.F) {
	f.Add("json:/id", "k", "key=a", []byte(`{"id":"evt_1"}`))
	f.Add("json:/a/b/order_id", `"k"`, "key=a&key=b", []byte(`{"a":{"x":[1,{}],"b":{"order_id":12}}}`))
	f.Add("json:/items/1", "a, b", "k%65y=%41", []byte(`{"items":["x","y"]}`))
	f.Add("query:key", "", "key=a+b%2F", []byte(`{"id":1.5}`))
	f.Add("header:Idempotency-Key", `"a\"b"`, "", []byte(`{"id":"\u00e9"}`))
	f.Add("body_sha256", "k", "", []byte("payload"))
	f.Add("cookie:idem", `theme=dark; idem="k-1"`, "", []byte(nil))
	f.Add("cookie:idem", "idem=a; idem=b", "", []byte(nil))
	f.Add("cookie:idem", "idem; idem=a", "", []byte(nil))
	f.Add("cookie:idem", `Idem=a; idem=b\c`, "", []byte(nil))
	f.Fuzz(func(t *testing.T, spec, header, rawQuery string, body []byte) {
		src, err := parseKeySource(spec)
		if err != nil {
			return
		}
		if again, err := parseKeySource(src.String()); err != nil || again.String() != src.String() {
			t.Fatalf("%q → %q does not parse back: %v", spec, src, err)
		}
		r := &http.Request{Header: http.Header{}, URL: &url.URL{RawQuery: rawQuery}}
		switch src.Kind {
		case KeyFromHeader:
			r.Header[src.Name] = []string{header}
		case KeyFromCookie:
			r.Header["Cookie"] = []string{header}
		}
		key, _, err := requestKeyFrom(r, []KeySource{src}, body, true)
		if err == nil {
			if checkKey(key) != nil {
				t.Fatalf("%s accepted an invalid key %q", src, key)
			}
		} else if err != errNoKey && !errors.As(err, new(*keySourceError)) && !(src.Kind == KeyFromJSON && errors.Is(err, jsonread.ErrDuplicateName)) {
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
		case KeyFromCookie:
			checkCookieKey(t, r, src.Name, key, err)
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

// checkJSONKey compares a json source's answer with encoding/json's reading
// of the value the pointer finds (FuzzFind, in internal/jsonread, checks
// that the value is the one encoding/json finds there).
func checkJSONKey(t *testing.T, body []byte, p jsonread.Pointer, key string, err error) {
	t.Helper()
	v, ferr := p.Find(body)
	if errors.Is(ferr, jsonread.ErrDuplicateName) {
		if !errors.Is(err, jsonread.ErrDuplicateName) {
			t.Fatalf("%s in %q: %q, %v; want the body refused", p, body, key, err)
		}
		return
	}
	found := ferr == nil
	want := ""
	if found {
		var s string
		var n json.Number
		switch {
		case json.Unmarshal(v, &s) == nil:
			want = s
		case json.Unmarshal(v, &n) == nil && !strings.ContainsAny(string(v), ".eE"):
			if n, perr := strconv.ParseInt(string(v), 10, 64); perr == nil {
				want = strconv.FormatInt(n, 10) // shortest: -0 is 0
			} else {
				found = false
			}
		default:
			found = false
		}
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

// checkCookieKey compares a cookie source's answer with net/http's, the
// reading of a Go upstream: a key is the one cookie net/http finds by that
// name, and a cookie net/http finds once, with a valid key for its value,
// is the key unless the proxy saw the name sent another way too (twice, or
// in another case) and refused it.
func checkCookieKey(t *testing.T, r *http.Request, name, key string, err error) {
	t.Helper()
	var found []string
	for _, c := range r.Cookies() {
		if c.Name == name {
			found = append(found, c.Value)
		}
	}
	if err == nil && (len(found) != 1 || found[0] != key) {
		t.Fatalf("cookie %s in %q: the key %q; net/http reads %q", name, r.Header.Get("Cookie"), key, found)
	}
	if len(found) == 1 && checkKey(found[0]) == nil && err != nil && !errors.Is(err, errKeyMultiple) && !errors.Is(err, errCookieCase) {
		t.Fatalf("cookie %s in %q: %v; net/http reads %q", name, r.Header.Get("Cookie"), err, found[0])
	}
}
