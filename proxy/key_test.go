package proxy

import (
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string
		want   string
		err    error
	}{
		{"raw", []string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{"quoted", []string{`"8e03978e"`}, "8e03978e", nil},
		{"quoted with escapes", []string{`"a\"b\\c"`}, `a"b\c`, nil},
		{"surrounding space", []string{`  "k"  `}, "k", nil},
		{"inner space", []string{"a b"}, "a b", nil},
		{"inner space quoted", []string{`"a b"`}, "a b", nil},
		{"tilde", []string{"a~b"}, "a~b", nil},
		{"tilde quoted", []string{`"a~b"`}, "a~b", nil},
		{"space and tilde quoted with escapes", []string{`"a b~\"c"`}, `a b~"c`, nil},
		{"escape first", []string{`"\"a"`}, `"a`, nil},
		{"absent", nil, "", errNoKey},
		{"empty", []string{""}, "", errEmptyKey},
		{"blank", []string{"   "}, "", errEmptyKey},
		{"empty quoted", []string{`""`}, "", errEmptyKey},
		{"255 bytes", []string{strings.Repeat("k", 255)}, strings.Repeat("k", 255), nil},
		{"256 bytes", []string{strings.Repeat("k", 256)}, "", errKeyTooLong},
		{"255 bytes quoted", []string{`"` + strings.Repeat("k", 255) + `"`}, strings.Repeat("k", 255), nil},
		{"control", []string{"a\x00b"}, "", errKeyCharset},
		{"DEL", []string{"a\x7fb"}, "", errKeyCharset},
		{"non-ASCII", []string{"cl\xc3\xa9"}, "", errKeyCharset},
		{"non-ASCII quoted", []string{"\"cl\xc3\xa9\""}, "", errKeyCharset},
		{"two lines", []string{"a", "b"}, "", errKeyMultiple},
		{"raw list", []string{"a, b"}, "", errKeyMultiple},
		{"raw list with an empty first member", []string{",a"}, "", errKeyMultiple},
		{"quoted list", []string{`"a", "b"`}, "", errKeyMultiple},
		{"bad escape", []string{`"a\nb"`}, "", errKeyMalformed},
		{"unterminated", []string{`"abc`}, "", errKeyMalformed},
		{"junk after string", []string{`"abc" x`}, "", errKeyMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.values != nil {
				h["Idempotency-Key"] = tc.values
			}
			got, err := parseKey(h, "Idempotency-Key")
			if err != tc.err || got != tc.want {
				t.Fatalf("parseKey(%q) = %q, %v; want %q, %v", tc.values, got, err, tc.want, tc.err)
			}
		})
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"k", `"k"`, `"a\"b"`, "a,b", `"a", "b"`, "", strings.Repeat("x", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := parseKey(http.Header{"Idempotency-Key": {v}}, "Idempotency-Key")
		if err != nil {
			return
		}
		if checkKey(key) != nil {
			t.Fatalf("parseKey(%q) accepted an invalid key %q", v, key)
		}
		// The RFC 8941 form of an accepted key names the same key.
		quoted := strconv.Quote(key) // printable ASCII: only \" and \\ are escaped
		again, err := parseKey(http.Header{"Idempotency-Key": {quoted}}, "Idempotency-Key")
		if err != nil || again != key {
			t.Fatalf("quoted form %s of %q parsed as %q, %v", quoted, key, again, err)
		}
	})
}

func TestFingerprint(t *testing.T) {
	base := func() *http.Request {
		r := httptest.NewRequest("POST", "/v1/charges?a=1", nil)
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("X-Other", "ignored")
		return r
	}
	headers := []string{"Content-Type"}
	want := fingerprint(base(), readAsSent(base()), "h.example", []byte("body"), headers)
	same := base()
	same.Header.Set("X-Other", "changed")
	if got := fingerprint(same, readAsSent(same), "h.example", []byte("body"), headers); got != want {
		t.Error("a header outside fingerprint_headers changed the fingerprint")
	}
	for name, change := range map[string]func(*http.Request) []byte{
		"method": func(r *http.Request) []byte { r.Method = "PUT"; return []byte("body") },
		"path":   func(r *http.Request) []byte { r.URL.Path = "/v1/refunds"; return []byte("body") },
		"query":  func(r *http.Request) []byte { r.URL.RawQuery = "a=2"; return []byte("body") },
		"header": func(r *http.Request) []byte { r.Header.Set("Content-Type", "text/plain"); return []byte("body") },
		"body":   func(r *http.Request) []byte { return []byte("bodY") },
		// Length prefixes keep boundaries: moving bytes between parts changes the hash.
		"boundary": func(r *http.Request) []byte {
			r.URL.Path = "/v1/charges?a=1"
			r.URL.RawQuery = ""
			return []byte("body")
		},
	} {
		r := base()
		body := change(r)
		if got := fingerprint(r, readAsSent(r), "h.example", body, headers); got == want {
			t.Errorf("changing the %s did not change the fingerprint", name)
		}
	}
}

func FuzzFingerprint(f *testing.F) {
	f.Add("/a", "q=1", "application/json", []byte("{}"))
	f.Fuzz(func(t *testing.T, path, query, ctype string, body []byte) {
		mk := func() *http.Request {
			r := httptest.NewRequest("POST", "/", nil)
			r.URL.Path, r.URL.RawQuery = path, query
			r.Header["Content-Type"] = []string{ctype}
			return r
		}
		a := fingerprint(mk(), readAsSent(mk()), "h.example", body, []string{"Content-Type"})
		if b := fingerprint(mk(), readAsSent(mk()), "h.example", body, []string{"Content-Type"}); a != b {
			t.Fatal("fingerprint is not deterministic")
		}
		if b := fingerprint(mk(), readAsSent(mk()), "h.example", append(body, 0), []string{"Content-Type"}); a == b {
			t.Fatal("a longer body has the same fingerprint")
		}
	})
}

func TestStorageKeyScopes(t *testing.T) {
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set("Authorization", "Bearer a")
	a := storageKeyFrom(r, readAs{}, "k", DefaultPolicy().ScopeHeaders, KeyFromHeader, "")
	if strings.Contains(a, "Bearer") || strings.Contains(a, "k") && len(a) != 32 {
		t.Fatalf("storage key %q leaks its inputs", a)
	}
	r.Header.Set("Authorization", "Bearer b")
	if b := storageKeyFrom(r, readAs{}, "k", DefaultPolicy().ScopeHeaders, KeyFromHeader, ""); a == b {
		t.Fatal("two Authorization values share a storage key")
	}
	if b := storageKeyFrom(r, readAs{}, "k", nil, KeyFromHeader, ""); b == storageKeyFrom(r, readAs{}, "k2", nil, KeyFromHeader, "") {
		t.Fatal("two keys share a storage key")
	}
}

// A storage key is the same bytes as every earlier version made it:
// records stored under it must replay after an upgrade.
func TestStorageKeysAreThoseOfEarlierVersions(t *testing.T) {
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set("Authorization", "Bearer a")
	if got, want := storageKeyFrom(r, readAs{}, "8e03978e-40d5-43e8-bc93-6894a57f9324", DefaultPolicy().ScopeHeaders, KeyFromHeader, ""), "12dc7073b647d4d851afa0a6dabc769f"; got != want {
		t.Errorf("a header key's storage key %s, want %s", got, want)
	}
	if got, want := storageKeyFrom(r, readAs{method: "POST", path: "/orders"}, "42", DefaultPolicy().ScopeHeaders, KeyFromJSON, "api.example"), "57d766500d5c751c7c64bb23118ad08f"; got != want {
		t.Errorf("a payload key's storage key %s, want %s", got, want)
	}
	r.Header.Set("Cookie", "session=alice; theme=dark")
	if got, want := storageKeyFrom(r, readAs{}, "8e03978e-40d5-43e8-bc93-6894a57f9324", []ScopeHeader{{Cookie: "session"}}, KeyFromHeader, ""), "28356689664a8617c6ca1aca0aba9a2d"; got != want {
		t.Errorf("a cookie-scoped key's storage key %s, want %s", got, want)
	}
	for c := range 256 {
		if got, want := hexKey([16]byte{15: byte(c)}), hex.EncodeToString([]byte{15: byte(c)}); got != want {
			t.Errorf("hexKey of byte %#x: %s, want %s", c, got, want)
		}
	}
}

// readAsSent is how the request path reads r's method and path for its
// fingerprint on a path_case: sensitive route.
func readAsSent(r *http.Request) readAs {
	t := readTarget(r)
	return fpReading(&t, PathCaseSensitive)
}
