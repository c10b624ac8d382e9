package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/jsonread"
)

func TestParseKeySourceForms(t *testing.T) {
	tests := []struct {
		in, want string
		kind     KeySourceKind
	}{
		{"header:Idempotency-Key", "header:Idempotency-Key", KeyFromHeader},
		{"header:x-github-delivery", "header:X-Github-Delivery", KeyFromHeader},
		{"header: X-Shopify-Webhook-Id", "header:X-Shopify-Webhook-Id", KeyFromHeader},
		{"query:idempotency_key", "query:idempotency_key", KeyFromQuery},
		{"cookie:idem_key", "cookie:idem_key", KeyFromCookie},
		{"cookie: Idem", "cookie:Idem", KeyFromCookie},
		{"json:/id", "json:/id", KeyFromJSON},
		{"json:/a/b~1c/order_id", "json:/a/b~1c/order_id", KeyFromJSON},
		{"body_sha256", "body_sha256", KeyFromBodySHA256},
	}
	for _, tc := range tests {
		var k KeySource
		if err := k.UnmarshalText([]byte(tc.in)); err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if k.Kind != tc.kind || k.String() != tc.want {
			t.Errorf("%q parsed as %v %q, want %v %q", tc.in, k.Kind, k, tc.kind, tc.want)
		}
		again, err := parseKeySource(k.String())
		if err != nil || again.String() != k.String() {
			t.Errorf("%q does not round-trip: %q, %v", k, again, err)
		}
	}
}

func TestParseKeySourceRejectsWithAReason(t *testing.T) {
	for in, want := range map[string]string{
		"":                  "empty key source: want header:NAME, query:NAME, cookie:NAME, json:/pointer or body_sha256",
		"Idempotency-Key":   `key source "Idempotency-Key": want header:NAME`,
		"header:":           "header: needs a header name",
		"header:Bad Name":   `"Bad Name" is not a valid header name`,
		"header:a:b":        `"a:b" is not a valid header name`,
		"query:":            "query: needs a parameter name",
		"json:id":           `JSON pointer "id" must start with "/"`,
		"json:":             "json: needs a pointer to a member",
		"json:/a~2":         `"~" must be followed by 0`,
		"body_sha256:x":     "body_sha256 takes no argument",
		"cookie:":           "cookie: needs a cookie name",
		"cookie:a b":        `"a b" is not a valid cookie name`,
		"form:session":      `unknown kind "form"`,
		"Header:X-Delivery": `unknown kind "Header"`,
	} {
		_, err := parseKeySource(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseKeySource(%q) error = %v, want one containing %q", in, err, want)
		}
	}
}

func mustSources(t testing.TB, specs ...string) []KeySource {
	t.Helper()
	out := make([]KeySource, len(specs))
	for i, s := range specs {
		k, err := parseKeySource(s)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = k
	}
	return out
}

func keyRequest(target string, header http.Header) *http.Request {
	r := httptest.NewRequest(http.MethodPost, target, nil)
	for name, values := range header {
		r.Header[name] = values
	}
	return r
}

func TestFirstKeySourcePresentGivesTheKey(t *testing.T) {
	sources := mustSources(t, "header:Idempotency-Key", "header:X-GitHub-Delivery", "query:key", "cookie:idem", "json:/id", "body_sha256")
	body := []byte(`{"id":"evt_1","object":"event"}`)
	tests := []struct {
		name   string
		target string
		header http.Header
		body   []byte
		want   string
	}{
		{"first header", "/?key=q", http.Header{"Idempotency-Key": {"k1"}, "X-Github-Delivery": {"d1"}}, body, "k1"},
		{"second header", "/?key=q", http.Header{"X-Github-Delivery": {"d1"}}, body, "d1"},
		{"query", "/?key=q", nil, body, "q"},
		{"query before cookie", "/?key=q", http.Header{"Cookie": {"idem=c1"}}, body, "q"},
		// A cookie is read as net/http reads it: its name trimmed, its
		// value without the quotes it may wear.
		{"cookie", "/", http.Header{"Cookie": {"theme=dark; idem=c1"}}, body, "c1"},
		{"quoted cookie", "/", http.Header{"Cookie": {`idem="c1"`}}, body, "c1"},
		{"cookie name spaced", "/", http.Header{"Cookie": {"idem =c1"}}, body, "c1"},
		{"another cookie", "/", http.Header{"Cookie": {"idempotency=c1"}}, body, "evt_1"},
		{"json", "/", nil, body, "evt_1"},
		{"body hash", "/", nil, []byte(`{"other":1}`), bodyHex([]byte(`{"other":1}`))},
		{"body hash of a cut body", "/", nil, []byte(`{"object":"event","id":`), bodyHex([]byte(`{"object":"event","id":`))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := requestKeyFrom(keyRequest(tc.target, tc.header), sources, tc.body, true)
			if err != nil || got != tc.want {
				t.Errorf("key = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func bodyHex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func TestKeyFromBodyAsksForTheBodyOnlyWhenReached(t *testing.T) {
	sources := mustSources(t, "header:Idempotency-Key", "json:/id")
	r := keyRequest("/", http.Header{"Idempotency-Key": {"k"}})
	if got, _, err := requestKeyFrom(r, sources, nil, false); err != nil || got != "k" {
		t.Fatalf("with the header: %q, %v; want the header's key without the body", got, err)
	}
	r = keyRequest("/", nil)
	if _, _, err := requestKeyFrom(r, sources, nil, false); err != errNeedBody {
		t.Fatalf("without the header: %v, want errNeedBody", err)
	}
	if got, _, err := requestKeyFrom(r, sources, []byte(`{"id":7}`), true); err != nil || got != "7" {
		t.Fatalf("with the body: %q, %v; want 7", got, err)
	}
	if _, _, err := requestKeyFrom(r, sources, nil, true); err != errNoKey {
		t.Fatalf("empty body: %v, want errNoKey", err)
	}
}

// A key that is present but invalid is refused: falling through to the
// next source would let a malformed key silently become another one.
func TestPresentInvalidKeyIsRefusedNotSkipped(t *testing.T) {
	sources := mustSources(t, "header:Idempotency-Key", "query:key", "cookie:idem", "json:/id")
	tests := []struct {
		name   string
		target string
		header http.Header
		body   string
		want   error
	}{
		{"two header lines", "/", http.Header{"Idempotency-Key": {"a", "b"}}, `{"id":"x"}`, errKeyMultiple},
		{"header list", "/", http.Header{"Idempotency-Key": {"a, b"}}, `{"id":"x"}`, errKeyMultiple},
		{"empty header", "/", http.Header{"Idempotency-Key": {""}}, `{"id":"x"}`, errEmptyKey},
		{"two query values", "/?key=a&key=b", nil, `{"id":"x"}`, errKeyMultiple},
		{"escaped name, twice", "/?key=a&k%65y=b", nil, `{"id":"x"}`, errKeyMultiple},
		{"empty query value", "/?key=", nil, `{"id":"x"}`, errEmptyKey},
		{"query without =", "/?key", nil, `{"id":"x"}`, errEmptyKey},
		{"bad escape", "/?key=%zz", nil, `{"id":"x"}`, errKeyEscape},
		{"query control char", "/?key=a%00b", nil, `{"id":"x"}`, errKeyCharset},
		{"two cookies", "/", http.Header{"Cookie": {"idem=a; idem=b"}}, `{"id":"x"}`, errKeyMultiple},
		{"cookie in two lines", "/", http.Header{"Cookie": {"idem=a", "idem=b"}}, `{"id":"x"}`, errKeyMultiple},
		{"cookie beside another line", "/", http.Header{"Cookie": {"theme=dark", "idem=a"}}, `{"id":"x"}`, errCookieLines},
		{"empty cookie", "/", http.Header{"Cookie": {"idem="}}, `{"id":"x"}`, errEmptyKey},
		{"json empty string", "/", nil, `{"id":""}`, errEmptyKey},
		{"json non-ASCII", "/", nil, `{"id":"caf\u00e9"}`, errKeyCharset},
		{"json escaped newline", "/", nil, `{"id":"a\nb"}`, errKeyCharset},
		{"json too long", "/", nil, `{"id":"` + strings.Repeat("k", 256) + `"}`, errKeyTooLong},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := requestKeyFrom(keyRequest(tc.target, tc.header), sources, []byte(tc.body), true)
			var kerr *keySourceError
			if !errors.Is(err, tc.want) || !errors.As(err, &kerr) {
				t.Fatalf("key = %q, %v; want a *keySourceError wrapping %v", got, err, tc.want)
			}
			if !strings.Contains(err.Error(), kerr.source.String()) {
				t.Errorf("error %q does not name its source", err)
			}
		})
	}
}

// A cookie key is the value a Go upstream's r.Cookie reads, or it is
// refused where upstreams read the cookie differently: never a key the
// upstream does not see, nor one read from a request it reads otherwise.
func TestCookieKeyIsReadAsTheUpstreamReadsItOrRefused(t *testing.T) {
	sources := mustSources(t, "cookie:idem", "json:/id")
	body := []byte(`{"id":"evt_1"}`)
	read := []struct {
		name  string
		lines []string
		want  string
	}{
		{"among others", []string{"theme=dark;idem=c1; x=y"}, "c1"},
		{"quoted", []string{`idem="c1"`}, "c1"},
		{"spaces around the pair", []string{" \tidem =c1 ;"}, "c1"},
		{"percent-encoding is kept", []string{"idem=a%41"}, "a%41"},
		{"no such cookie", []string{"theme=dark"}, "evt_1"},
		{"a longer name", []string{"idempotency=c1"}, "evt_1"},
		{"a name led by a no-break space", []string{"\u00a0idem=c1"}, "evt_1"},
		{"the most cookies net/http reads", []string{strings.Repeat("a=1; ", maxCookies-1) + "idem=c1"}, "c1"},
	}
	for _, tc := range read {
		t.Run(tc.name, func(t *testing.T) {
			r := keyRequest("/", http.Header{"Cookie": tc.lines})
			got, _, err := requestKeyFrom(r, sources, body, true)
			if err != nil || got != tc.want {
				t.Fatalf("key = %q, %v; want %q", got, err, tc.want)
			}
			if c, err := r.Cookie("idem"); got != "evt_1" && (err != nil || c.Value != got) {
				t.Fatalf("net/http reads %v, %v; the proxy %q", c, err, got)
			}
		})
	}
	refused := []struct {
		name  string
		lines []string
		want  error
	}{
		{"a bare name is an empty cookie", []string{"idem"}, errEmptyKey},
		{"a bare name before the cookie", []string{"idem; idem=c1"}, errKeyMultiple},
		{"two cookies", []string{"idem=a; idem=b"}, errKeyMultiple},
		{"two lines with it", []string{"idem=a", "idem=b"}, errKeyMultiple},
		{"another case too", []string{"IDEM=a; idem=b"}, errKeyMultiple},
		{"only another case", []string{"Idem=c1"}, errCookieCase},
		{"another line", []string{"theme=dark", "idem=c1"}, errCookieLines},
		{"an empty second line", []string{"idem=c1", ""}, errCookieLines},
		{"a backslash", []string{`idem=a\b`}, errCookieValue},
		{"a quote inside", []string{`idem=a"b`}, errCookieValue},
		{"one quote", []string{`idem="c1`}, errCookieValue},
		{"an octal escape in quotes", []string{`idem="a\073b"`}, errCookieValue},
		{"a comma and the name again", []string{`idem=c1, idem=c2`}, errCookieValue},
		{"a comma", []string{`idem=c1,c2`}, errCookieValue},
		{"a space after the equals sign", []string{"idem= c1"}, errCookieValue},
		{"a space and the name again", []string{`idem=c1 idem=c2`}, errCookieValue},
		{"a space in quotes", []string{`idem="c1 c2"`}, errCookieValue},
		{"a trailing no-break space", []string{"idem=c1\u00a0"}, errKeyCharset},
		{"more cookies than net/http reads", []string{strings.Repeat("a=1; ", maxCookies) + "idem=c1"}, errCookieCount},
		{"empty", []string{"idem="}, errEmptyKey},
		{"empty in quotes", []string{`idem=""`}, errEmptyKey},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := requestKeyFrom(keyRequest("/", http.Header{"Cookie": tc.lines}), sources, body, true)
			var kerr *keySourceError
			if !errors.Is(err, tc.want) || !errors.As(err, &kerr) {
				t.Fatalf("key = %q, %v; want a *keySourceError wrapping %v", got, err, tc.want)
			}
		})
	}
}

func TestQueryKeyIsDecoded(t *testing.T) {
	sources := mustSources(t, "query:idempotency_key")
	for target, want := range map[string]string{
		"/?idempotency_key=abc":                         "abc",
		"/?a=1&idempotency_key=abc&b=2":                 "abc",
		"/?idempotency_key=a%2Fb+c":                     "a/b c",
		"/?idempotency_key=a+b":                         "a b",
		"/?idempotency_key=+k":                          " k",
		"/?idempotency%5Fkey=x":                         "x",
		"/?idempotency_key=x=y":                         "x=y",
		"/?idempotency_key=" + strings.Repeat("k", 255): strings.Repeat("k", 255),
	} {
		got, _, err := requestKeyFrom(keyRequest(target, nil), sources, nil, true)
		if err != nil || got != want {
			t.Errorf("%s: key %q, %v; want %q", target, got, err, want)
		}
	}
	for _, target := range []string{"/", "/?other=1", "/?Idempotency_key=x", "/?idempotency_keyx=1"} {
		if got, _, err := requestKeyFrom(keyRequest(target, nil), sources, nil, true); err != errNoKey {
			t.Errorf("%s: key %q, %v; want absent", target, got, err)
		}
	}
}

// A query parameter's name is percent-decoded as url.ParseQuery decodes
// it, wherever its escapes are: at its first byte, or a "+" for a space.
func TestQueryKeyNameIsDecodedWhereverItsEscapesAre(t *testing.T) {
	for _, tc := range []struct{ query, name string }{
		{"%69dem=x", "idem"},
		{"a=1&idem%5Fkey=x", "idem_key"},
		{"idem+key=x", "idem key"},
		{"+idem=x", " idem"},
		{"%20idem=x", " idem"},
	} {
		if got, err := queryKey(tc.query, tc.name); err != nil || got != "x" {
			t.Errorf("%q in %q: %q, %v; want x", tc.name, tc.query, got, err)
		}
	}
}

func TestJSONKeyIsAStringOrAnInteger(t *testing.T) {
	tests := []struct{ ptr, body, want string }{
		{"/id", `{"id":"evt_1NqT"}`, "evt_1NqT"},
		{"/id", ` { "type" : "x" , "id" : "evt_2" } `, "evt_2"},
		{"/id", `{"id":"a\"b\\c\/d"}`, `a"b\c/d`},
		{"/id", `{"id":"\u0041BC"}`, "ABC"},
		{"/id", `{"id":12345}`, "12345"},
		{"/id", `{"id":-7}`, "-7"},
		{"/id", `{"id":9007199254740991}`, "9007199254740991"},
		{"/id", `{"id":-9007199254740991}`, "-9007199254740991"},
		{"/a/b/order_id", `{"a":{"x":[1,{"y":null}],"b":{"order_id":"ord_9"}}}`, "ord_9"},
		{"/data/object/id", `{"data":{"object":{"id":"ch_1"}},"id":"evt_3"}`, "ch_1"},
		{"/items/1/sku", `{"items":[{"sku":"a"},{"sku":"b"}]}`, "b"},
		{"/id", `{"ID":"ord_7"}`, "ord_7"}, // as a Go upstream reads it
		{"/id", "\xef\xbb\xbf{\"id\":\"evt_1\"}", "evt_1"},
	}
	for _, tc := range tests {
		got, _, err := requestKeyFrom(keyRequest("/", nil), mustSources(t, "json:"+tc.ptr), []byte(tc.body), true)
		if err != nil || got != tc.want {
			t.Errorf("%s in %s: %q, %v; want %q", tc.ptr, tc.body, got, err, tc.want)
		}
	}
}

// The body belongs to the upstream: whatever it holds, a json source
// finds a key or finds none, and never refuses the request.
func TestJSONKeyIsAbsentFromBodiesItCannotUse(t *testing.T) {
	deep := strings.Repeat(`{"id":`, jsonread.MaxDepth+1) + `"x"` + strings.Repeat("}", jsonread.MaxDepth+1)
	for name, body := range map[string]string{
		"empty":            ``,
		"form":             `id=evt_1&type=x`,
		"not JSON":         `<id>evt_1</id>`,
		"truncated":        `{"id":"evt_`,
		"truncated before": `{"type":"x",`,
		"no member":        `{"type":"x"}`,
		"array body":       `[{"id":"x"}]`,
		"null":             `{"id":null}`,
		"bool":             `{"id":true}`,
		"object":           `{"id":{"v":1}}`,
		"array":            `{"id":[1]}`,
		"float":            `{"id":1.5}`,
		"exponent":         `{"id":1e3}`,
		"beyond 2^53":      `{"id":9007199254740992}`,
		"beyond -2^53":     `{"id":-9007199254740992}`,
		"beyond 2^53, odd": `{"id":9007199254740993}`,
		"int64's largest":  `{"id":9223372036854775807}`,
		"huge":             `{"id":9223372036854775808}`,
		"huge negative":    `{"id":-9223372036854775809}`,
		"very huge":        `{"id":` + strings.Repeat("9", 5000) + `}`,
		"bad earlier":      `{"a":tru,"id":"x"}`,
		"control in name":  "{\"a\x01\":1,\"id\":\"x\"}",
		"deep":             deep,
	} {
		got, _, err := requestKeyFrom(keyRequest("/", nil), mustSources(t, "json:/id"), []byte(body), true)
		if err != errNoKey {
			t.Errorf("%s: %q, %v; want absent", name, got, err)
		}
	}
	// Containers skipped on the way to the key count towards the bound too.
	pad := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for n, want := range map[int]error{jsonread.MaxDepth - 1: nil, jsonread.MaxDepth: errNoKey} {
		body := `{"pad":` + pad(n) + `,"id":"x"}`
		if _, _, err := requestKeyFrom(keyRequest("/", nil), mustSources(t, "json:/id"), []byte(body), true); err != want {
			t.Errorf("%d nested arrays before the key: %v, want %v", n, err, want)
		}
	}
	// Nesting within the bound is followed.
	ptr := strings.Repeat("/id", jsonread.MaxDepth)
	ok := strings.Repeat(`{"id":`, jsonread.MaxDepth) + `"x"` + strings.Repeat("}", jsonread.MaxDepth)
	if got, _, err := requestKeyFrom(keyRequest("/", nil), mustSources(t, "json:"+ptr), []byte(ok), true); err != nil || got != "x" {
		t.Errorf("%d levels: %q, %v; want x", jsonread.MaxDepth, got, err)
	}
	deepPtr := strings.Repeat("/id", jsonread.MaxDepth+1)
	if got, _, err := requestKeyFrom(keyRequest("/", nil), mustSources(t, "json:"+deepPtr), []byte(deep), true); err != errNoKey {
		t.Errorf("%d levels: %q, %v; want absent", jsonread.MaxDepth+1, got, err)
	}
}

// A key is read only from a body that is one JSON text throughout: an
// upstream refuses the rest, or reads it some other way.
func TestJSONKeyNeedsTheWholeBodyToBeJSON(t *testing.T) {
	for _, body := range []string{`{"id":"evt_1", this is not JSON`, `{"id":"evt_1"} {"id":"evt_2"}`, `{"id":01}`, "{\"id\":\"evt_1\",\"n\":\"\xff\"}"} {
		if got, _, err := requestKeyFrom(keyRequest("/", nil), mustSources(t, "json:/id"), []byte(body), true); err != errNoKey {
			t.Errorf("%.30q: %q, %v; want absent", body, got, err)
		}
	}
}

// An integer key is taken in its shortest decimal form: -0 and 0 are one
// number to every reader, so one key.
func TestJSONIntegerKeyIsItsShortestForm(t *testing.T) {
	for body, want := range map[string]string{`{"id":-0}`: "0", `{"id":0}`: "0", `{"id":-12}`: "-12"} {
		if got, _, err := requestKeyFrom(keyRequest("/", nil), mustSources(t, "json:/id"), []byte(body), true); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", body, got, err, want)
		}
	}
}

// A body that repeats the key's member name, or any other, is refused
// rather than keyed: {"id":"ord_1","id":"ord_9"} is ord_9 to Go, Python and
// JavaScript, {"id":"ord_5","ID":"ord_7"} ord_7 to a Go upstream.
func TestJSONKeyFromARepeatedNameIsRefused(t *testing.T) {
	for _, body := range []string{`{"id":"ord_1","id":"ord_9"}`, `{"id":"ord_5","ID":"ord_7"}`, `{"id":"ord_1","items":[{"sku":"a","SKU":"b"}]}`} {
		got, _, err := requestKeyFrom(keyRequest("/", nil), mustSources(t, "json:/id"), []byte(body), true)
		if !errors.Is(err, jsonread.ErrDuplicateName) {
			t.Errorf("%s: %q, %v; want ErrDuplicateName", body, got, err)
		}
	}
}

func TestBodySHA256KeyIsTheHexDigestOfANonEmptyBody(t *testing.T) {
	sources := mustSources(t, "body_sha256")
	body := []byte("payload=1")
	got, _, err := requestKeyFrom(keyRequest("/", nil), sources, body, true)
	if want := bodyHex(body); err != nil || got != want {
		t.Fatalf("%q, %v; want %q", got, err, want)
	}
	if got, _, err := requestKeyFrom(keyRequest("/", nil), sources, nil, true); err != errNoKey {
		t.Fatalf("empty body: %q, %v; want absent", got, err)
	}
}

func TestDescribeKeySources(t *testing.T) {
	for _, tc := range []struct {
		specs []string
		want  string
	}{
		{[]string{"header:Idempotency-Key"}, "the Idempotency-Key header"},
		{[]string{"header:Idempotency-Key", "json:/id"}, "the Idempotency-Key header or a JSON string or integer at /id in the body"},
		{[]string{"query:k", "header:X-Key", "body_sha256"}, "the k query parameter, the X-Key header or a body"},
		{[]string{"cookie:session", "header:X-Key"}, "the session cookie or the X-Key header"},
	} {
		if got := describeKeySources(mustSources(t, tc.specs...)); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.specs, got, tc.want)
		}
	}
}

// A key source built in code without a kind would find no key: Check
// refuses it under its index, naming the forms a source takes.
func TestKeySourceWithoutAKindIsRefused(t *testing.T) {
	p := DefaultPolicy()
	p.Header = ""
	p.KeySources = []KeySource{{Kind: KeyFromHeader, Name: "Idempotency-Key"}, {}}
	want := "key_sources[1]: empty key source: want " + keySourceForms
	if got := p.Check(nil); len(got) != 1 || got[0].Error() != want {
		t.Errorf("Check = %v, want %q", got, want)
	}
}

// Each registered kind owns one constant and one word, and its form parses
// to a source of its kind: a kind added to keyKinds with a constant or a
// word already taken, or a form it does not parse, fails here.
func TestEveryKeySourceKindIsRegisteredOnce(t *testing.T) {
	words := map[string]bool{}
	for _, kk := range keyKinds {
		k := kk.kind()
		if k == 0 || kinds[k].keyKind != kk {
			t.Errorf("%s: its constant %d maps to %v, not to it", kk.form(), k, k.of())
		}
		if w := k.word(); words[w] {
			t.Errorf("%s: the word %q is another kind's", kk.form(), w)
		} else {
			words[w] = true
		}
		form := strings.Replace(kk.form(), "NAME", "Idem", 1)
		form = strings.Replace(form, "/pointer", "/id", 1)
		src, err := parseKeySource(form)
		if err != nil || src.Kind != k {
			t.Errorf("%q parses as %v, %v; want a source of its own kind %d", form, src.Kind, err, k)
		}
	}
}
