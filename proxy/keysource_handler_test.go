package proxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/store"

	"github.com/idempotency-proxy/idempotency-proxy/internal/jsonread"
)

// Key sources through the whole handler (docs/request-handling.md, "Where
// the key comes from").

func keySources(t testing.TB, forms ...string) func(*Policy) {
	t.Helper()
	srcs := make([]KeySource, len(forms))
	for i, f := range forms {
		s, err := parseKeySource(f)
		if err != nil {
			t.Fatal(err)
		}
		srcs[i] = s
	}
	return func(p *Policy) { p.Header, p.KeySources = "", srcs }
}

// The same order id sent to two endpoints names two operations: a key
// derived from the payload is namespaced by method and path, so neither a
// 422 nor, worse, the other endpoint's response.
func TestPayloadKeyOnAnotherPathIsAnotherOperation(t *testing.T) {
	for _, src := range []string{"json:/order_id", "body_sha256"} {
		t.Run(src, func(t *testing.T) {
			e := newEnv(t, nil, withPolicy(keySources(t, src)))
			const body = `{"order_id":42}`
			create := e.do(t, "POST", "/orders", "", body)
			cancel := e.do(t, "POST", "/orders/cancel", "", body)
			if create.StatusCode != http.StatusCreated || cancel.StatusCode != http.StatusCreated || cancel.replayed() {
				t.Fatalf("create %d, cancel %d (replayed %v): want two executions", create.StatusCode, cancel.StatusCode, cancel.replayed())
			}
			put := e.do(t, "PUT", "/orders", "", body)
			if put.StatusCode != http.StatusCreated || put.replayed() {
				t.Fatalf("PUT after POST: %d replayed=%v, want its own execution", put.StatusCode, put.replayed())
			}
			again := e.do(t, "POST", "/orders/cancel", "", body)
			if !again.replayed() || again.body != cancel.body {
				t.Fatalf("retry of the cancel: replayed=%v body %q, want the cancel's response %q", again.replayed(), again.body, cancel.body)
			}
			if got := e.up.calls.Load(); got != 3 {
				t.Errorf("upstream executions = %d, want 3", got)
			}
		})
	}
}

// A client-chosen key is not namespaced: reused on another path it is a 422.
func TestHeaderKeyOnAnotherPathIsAMismatch(t *testing.T) {
	e := newEnv(t, nil)
	e.do(t, "POST", "/orders", "k-1", `{}`)
	if r := e.do(t, "POST", "/orders/cancel", "k-1", `{}`); r.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("status %d, want 422", r.StatusCode)
	}
}

func TestFirstPresentSourceGivesTheKey(t *testing.T) {
	e := newEnv(t, nil, withPolicy(keySources(t, "header:X-GitHub-Delivery", "json:/id")))
	// From the body.
	e.do(t, "POST", "/hook", "", `{"id":"evt_1"}`)
	if r := e.do(t, "POST", "/hook", "", `{"id":"evt_1"}`); !r.replayed() {
		t.Fatal("json:/id: second delivery not replayed")
	}
	// The header wins over the body: a new delivery id is a new key.
	r := e.do(t, "POST", "/hook", "", `{"id":"evt_1"}`, "X-GitHub-Delivery", "d-1")
	if r.replayed() {
		t.Fatal("header:X-GitHub-Delivery did not take precedence over json:/id")
	}
	if r := e.do(t, "POST", "/hook", "", `{"id":"evt_2"}`, "X-GitHub-Delivery", "d-1"); r.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("same delivery id, another body: %d, want 422", r.StatusCode)
	}
	// A present but invalid key never falls through to the next source.
	if r := e.do(t, "POST", "/hook", "", `{"id":"evt_3"}`, "X-GitHub-Delivery", strings.Repeat("d", 256)); r.problemType() != "invalid-key" {
		t.Fatalf("invalid header key: %d %s, want 400 invalid-key", r.StatusCode, r.problemType())
	}
}

// A body a json: source cannot read is no key — never a 500 — and
// require_key decides; a request forwarded without a key keeps its body.
func TestUnreadableJSONIsNoKey(t *testing.T) {
	bodies := map[string]string{
		"not JSON":     `order_id=42`,
		"truncated":    `{"amount":10,"order_id`,
		"too deep":     strings.Repeat(`{"a":`, 100) + `1` + strings.Repeat(`}`, 100),
		"huge number":  `{"order_id":123456789012345678901234567890}`,
		"fraction":     `{"order_id":4.2}`,
		"an object":    `{"order_id":{"n":42}}`,
		"empty":        ``,
		"deep pointer": `{"order_id":` + strings.Repeat(`[`, 70) + strings.Repeat(`]`, 70) + `}`,
		"not UTF-8":    "{\"order_id\":\"\xff\"}",
		"leading zero": `{"order_id":042}`,
	}
	for _, require := range []bool{false, true} {
		e := newEnv(t, nil, withPolicy(keySources(t, "json:/order_id")), withPolicy(func(p *Policy) { p.RequireKey = require }))
		for name, body := range bodies {
			r := e.do(t, "POST", "/orders", "", body)
			switch {
			case require && (r.StatusCode != http.StatusBadRequest || r.problemType() != "missing-key"):
				t.Errorf("require_key, %s: %d %s, want 400 missing-key", name, r.StatusCode, r.problemType())
			case require && !strings.Contains(r.body, "a JSON string or integer at /order_id in the body"):
				t.Errorf("require_key, %s: detail %s does not name the source", name, r.body)
			case !require && r.StatusCode != http.StatusCreated:
				t.Errorf("%s: %d, want forwarded unprotected", name, r.StatusCode)
			case !require && string(readAll(t, e.up.last())) != body:
				t.Errorf("%s: upstream did not get the body as sent", name)
			}
		}
		// A string that is there but is no valid key is refused, as from
		// any source: the same validation for every source.
		if r := e.do(t, "POST", "/orders", "", `{"order_id":"caf\u00e9"}`); r.problemType() != "invalid-key" {
			t.Errorf("a non-ASCII order_id: %d %s, want 400 invalid-key", r.StatusCode, r.problemType())
		}
		if !require {
			if got := e.outcomes(defaultRoute, OutcomeNoKey); got != float64(len(bodies)) {
				t.Errorf("no_key = %v, want %d", got, len(bodies))
			}
		}
	}
}

// A partner that renews sent_at on every retry, and sends its members in
// another order, still gets the replay; another amount is a 422.
func TestFingerprintIgnoreReplaysARetryWithANewTimestamp(t *testing.T) {
	e := newEnv(t, nil, withPolicy(keySources(t, "json:/order_id")), withPolicy(func(p *Policy) {
		p.FingerprintIgnore = []jsonread.Pointer{mustPointer(t, "/sent_at")}
	}))
	first := e.do(t, "POST", "/orders", "", `{"order_id":"o-1","amount":10,"sent_at":"2026-11-30T10:00:00Z"}`)
	retry := e.do(t, "POST", "/orders", "", `{ "sent_at":"2026-11-30T10:00:05Z", "amount":10, "order_id":"o-1" }`)
	if !retry.replayed() || retry.body != first.body {
		t.Fatalf("retry with a new sent_at: replayed=%v, want the first response", retry.replayed())
	}
	if r := e.do(t, "POST", "/orders", "", `{"order_id":"o-1","amount":11,"sent_at":"2026-11-30T10:00:09Z"}`); r.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("another amount: %d, want 422", r.StatusCode)
	}
}

// A body that is not JSON is hashed as sent under canonical: executed,
// replayed, never refused.
func TestCanonicalFingerprintHashesNonJSONRaw(t *testing.T) {
	e := newEnv(t, nil, withPolicy(func(p *Policy) { p.FingerprintJSON = FingerprintCanonical }))
	for _, body := range []string{"a=1&b=2", `{"a":1`} {
		first := e.do(t, "POST", "/form", "k-"+body, body)
		again := e.do(t, "POST", "/form", "k-"+body, body)
		if first.StatusCode != http.StatusCreated || !again.replayed() {
			t.Errorf("%q: %d then replayed=%v, want executed then replayed", body, first.StatusCode, again.replayed())
		}
		if r := e.do(t, "POST", "/form", "k-"+body, body+" "); r.StatusCode != http.StatusUnprocessableEntity {
			t.Errorf("%q with a byte more: %d, want 422", body, r.StatusCode)
		}
	}
}

// Whatever header the key comes from, it reaches the upstream even when
// the client lists it in Connection.
func TestEveryKeyHeaderIsForwardedDespiteConnection(t *testing.T) {
	e := newEnv(t, nil, withPolicy(keySources(t, "header:X-Request-Id", "header:X-GitHub-Delivery")))
	e.do(t, "POST", "/hook", "", `{}`, "X-GitHub-Delivery", "d-9", "Connection", "X-GitHub-Delivery, X-Request-Id")
	if got := e.up.last().Header.Get("X-GitHub-Delivery"); got != "d-9" {
		t.Fatalf("upstream saw X-GitHub-Delivery %q, want d-9", got)
	}
}

// A key cookie reaches the upstream as the key header does, even when the
// client lists Cookie in Connection: the upstream reads the key the proxy
// read, and may deduplicate on it too.
func TestKeyCookieIsForwardedDespiteConnection(t *testing.T) {
	e := newEnv(t, nil, withPolicy(keySources(t, "header:X-Request-Id", "cookie:idem")))
	e.do(t, "POST", "/form", "", `{}`, "Cookie", "theme=dark; idem=c-9", "Connection", "Cookie, X-Other", "X-Other", "gone")
	seen := e.up.last().Header
	if c, err := (&http.Request{Header: seen}).Cookie("idem"); err != nil || c.Value != "c-9" {
		t.Fatalf("upstream read the idem cookie as %v, %v; want c-9", c, err)
	}
	if got := seen.Get("X-Other"); got != "" {
		t.Errorf("X-Other, named in Connection, reached the upstream: %q", got)
	}
}

// The hash the admin API computes is the storage key the request path
// used, for every kind of source.
func TestKeyHashIsTheStorageKeyForEverySource(t *testing.T) {
	for _, tc := range []struct{ source, key, body string }{
		{"header:X-Delivery", "d-1", `{}`},
		{"query:key", "q-1", `{}`},
		{"cookie:idem", "c-1", `{}`},
		{"json:/id", "evt_1", `{"id":"evt_1"}`},
		{"json:/id", "42", `{"id":42}`},
		{"body_sha256", "", "a=1&b=2"},
	} {
		t.Run(tc.source, func(t *testing.T) {
			e := newEnv(t, nil, withPolicy(keySources(t, "header:X-Delivery", "query:key", "cookie:idem", "json:/id", "body_sha256")))
			path := "/v1/things"
			var header []string
			switch {
			case strings.HasPrefix(tc.source, "header:"):
				header = []string{"X-Delivery", tc.key}
			case strings.HasPrefix(tc.source, "query:"):
				path += "?key=" + tc.key
			case strings.HasPrefix(tc.source, "cookie:"):
				header = []string{"Cookie", `theme=dark; idem="` + tc.key + `"`}
			}
			if r := e.do(t, "POST", path, "", tc.body, header...); r.StatusCode != http.StatusCreated {
				t.Fatalf("status %d", r.StatusCode)
			}
			req, _ := http.NewRequest("POST", e.srv.URL+path, strings.NewReader(tc.body))
			req.Host = strings.TrimPrefix(e.srv.URL, "http://")
			for i := 0; i+1 < len(header); i += 2 {
				req.Header.Set(header[i], header[i+1])
			}
			fromRequest, err := e.handler.KeyHashFrom(req, "", "")
			if err != nil {
				t.Fatal(err)
			}
			assertCompleted(t, e.store, fromRequest)
			if tc.key != "" {
				named, err := e.handler.KeyHashFrom(req, tc.key, tc.source)
				if err != nil || named != fromRequest {
					t.Fatalf("KeyHashFrom(%q, %q) = %q, %v; want %q", tc.key, tc.source, named, err, fromRequest)
				}
			}
		})
	}
}

func assertCompleted(t *testing.T, st Store, keyHash string) {
	t.Helper()
	res, err := st.Begin(context.Background(), keyHash, store.Lease{}, 1e9)
	if err != nil {
		t.Fatal(err)
	}
	if res.State != store.Completed {
		t.Fatalf("no record under %s: the hash is not the request path's", keyHash)
	}
}

func readAll(t *testing.T, r *http.Request) []byte {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
