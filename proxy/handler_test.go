package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// Rows of the table in docs/request-handling.md.

func TestFirstRequestExecutesOnceAndIsReplayed(t *testing.T) {
	e := newEnv(t, nil)
	first := e.do(t, "POST", "/v1/charges?x=1", "k-1", `{"amount":10}`)
	if got, want := first.StatusCode, http.StatusCreated; got != want {
		t.Fatalf("first status = %d, want %d", got, want)
	}
	if first.replayed() {
		t.Error("first response marked as replayed")
	}
	for i := 0; i < 3; i++ {
		again := e.do(t, "POST", "/v1/charges?x=1", "k-1", `{"amount":10}`)
		if again.StatusCode != first.StatusCode || again.body != first.body {
			t.Fatalf("replay = %d %q, want %d %q", again.StatusCode, again.body, first.StatusCode, first.body)
		}
		if !again.replayed() {
			t.Error("replay lacks Idempotent-Replayed: true")
		}
		if got, want := again.Header.Get("X-Execution"), first.Header.Get("X-Execution"); got != want {
			t.Errorf("replayed X-Execution = %q, want %q", got, want)
		}
	}
	if got := e.up.calls.Load(); got != 1 {
		t.Fatalf("upstream executions = %d, want 1", got)
	}
	if got := e.outcomes(defaultRoute, OutcomeExecuted); got != 1 {
		t.Errorf("executed = %v, want 1", got)
	}
	if got := e.outcomes(defaultRoute, OutcomeReplayed); got != 3 {
		t.Errorf("replayed = %v, want 3", got)
	}
}

func TestKeyIsForwardedUpstreamUnchanged(t *testing.T) {
	e := newEnv(t, nil)
	e.do(t, "POST", "/x", `"quoted-key"`, "{}")
	if got, want := e.up.last().Header.Get("Idempotency-Key"), `"quoted-key"`; got != want {
		t.Fatalf("upstream saw Idempotency-Key %q, want %q", got, want)
	}
}

func TestQuotedAndRawKeyAreTheSameKey(t *testing.T) {
	e := newEnv(t, nil)
	e.do(t, "POST", "/x", "8e03978e-40d5-43e8-bc93-6894a57f9324", "{}")
	r := e.do(t, "POST", "/x", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, "{}")
	if !r.replayed() || e.up.calls.Load() != 1 {
		t.Fatalf("quoted form of a raw key: replayed=%v executions=%d, want replay of the one execution", r.replayed(), e.up.calls.Load())
	}
}

func TestPassThrough(t *testing.T) {
	e := newEnv(t, nil, func(o *Options) {
		o.Routes = []Route{{Pattern: "/internal/", Disabled: true, Policy: DefaultPolicy()}}
	})
	for _, tc := range []struct{ method, path string }{
		{"GET", "/v1/charges"},        // method not protected
		{"POST", "/internal/rebuild"}, // disabled route
	} {
		before := e.up.calls.Load()
		a := e.do(t, tc.method, tc.path, "same-key", "")
		b := e.do(t, tc.method, tc.path, "same-key", "")
		if got := e.up.calls.Load() - before; got != 2 || a.replayed() || b.replayed() {
			t.Errorf("%s %s: executions = %d, replayed = %v/%v; want 2 plain executions", tc.method, tc.path, got, a.replayed(), b.replayed())
		}
	}
	if got := e.outcomes("/internal/", OutcomePassthrough); got != 2 {
		t.Errorf("passthrough on /internal/ = %v, want 2", got)
	}
}

func TestNoKey(t *testing.T) {
	t.Run("optional", func(t *testing.T) {
		e := newEnv(t, nil)
		e.do(t, "POST", "/x", "", "{}")
		r := e.do(t, "POST", "/x", "", "{}")
		if r.StatusCode != http.StatusCreated || e.up.calls.Load() != 2 {
			t.Fatalf("status %d, executions %d; want 201 and 2 executions", r.StatusCode, e.up.calls.Load())
		}
		if got := e.outcomes(defaultRoute, OutcomeNoKey); got != 2 {
			t.Errorf("no_key = %v, want 2", got)
		}
	})
	t.Run("required", func(t *testing.T) {
		e := newEnv(t, nil, withPolicy(func(p *Policy) { p.RequireKey = true }))
		r := e.do(t, "POST", "/x", "", "{}")
		if r.StatusCode != http.StatusBadRequest || r.problemType() != "missing-key" {
			t.Fatalf("got %d %q, want 400 missing-key", r.StatusCode, r.body)
		}
		if e.up.calls.Load() != 0 {
			t.Fatal("upstream called without a key")
		}
	})
}

func TestInvalidKeys(t *testing.T) {
	e := newEnv(t, nil)
	for name, header := range map[string][]string{
		"empty":          {"Idempotency-Key", ""},
		"empty quoted":   {"Idempotency-Key", `""`},
		"too long":       {"Idempotency-Key", strings.Repeat("k", 256)},
		"non-printable":  {"Idempotency-Key", "a\tb"}, // Go's client refuses other controls
		"non-ascii":      {"Idempotency-Key", "clé"},
		"list":           {"Idempotency-Key", `"a", "b"`},
		"raw list":       {"Idempotency-Key", "a,b"},
		"two lines":      {"Idempotency-Key", "a", "Idempotency-Key", "b"},
		"bad escape":     {"Idempotency-Key", `"a\nb"`},
		"unterminated":   {"Idempotency-Key", `"abc`},
		"trailing bytes": {"Idempotency-Key", `"abc"x`},
	} {
		t.Run(name, func(t *testing.T) {
			r := e.do(t, "POST", "/x", "", "{}", header...)
			if r.StatusCode != http.StatusBadRequest || r.problemType() != "invalid-key" {
				t.Fatalf("got %d %s, want 400 invalid-key", r.StatusCode, r.body)
			}
		})
	}
	if e.up.calls.Load() != 0 {
		t.Fatal("upstream called with an invalid key")
	}
	if r := e.do(t, "POST", "/x", strings.Repeat("k", 255), "{}"); r.StatusCode != http.StatusCreated {
		t.Fatalf("255-byte key: got %d, want 201", r.StatusCode)
	}
	if r := e.do(t, "POST", "/x", `"`+strings.Repeat("k", 255)+`"`, "{}"); !r.replayed() {
		t.Fatalf("quoted 255-byte key: the limit applies without quotes; got %d %s", r.StatusCode, r.body)
	}
}

func TestRequestBodyTooLarge(t *testing.T) {
	e := newEnv(t, nil, withPolicy(func(p *Policy) { p.MaxRequestBody = 16 }))
	r := e.do(t, "POST", "/x", "k", strings.Repeat("x", 17))
	if r.StatusCode != http.StatusRequestEntityTooLarge || r.problemType() != "body-too-large" {
		t.Fatalf("got %d %s, want 413 body-too-large", r.StatusCode, r.body)
	}
	// The limit is told as max_request_body is written.
	if !strings.Contains(r.body, "limit of 16B.") {
		t.Errorf("detail of %s does not give the limit as 16B", r.body)
	}
	// Nothing was locked: the key is free for a request that fits.
	if r := e.do(t, "POST", "/x", "k", strings.Repeat("x", 16)); r.StatusCode != http.StatusCreated || r.replayed() {
		t.Fatalf("after 413: got %d replayed=%v, want a fresh 201", r.StatusCode, r.replayed())
	}
}

// A body sent without a declared length (chunked) is held to
// max_request_body as it is read: up to the limit it is forwarded whole,
// one byte more is refused.
func TestChunkedRequestBodyUpToTheLimitIsForwardedWhole(t *testing.T) {
	e := newEnv(t, nil, withPolicy(func(p *Policy) { p.MaxRequestBody = 16 }))
	post := func(key, body string) *http.Response {
		t.Helper()
		// A reader of unknown length: the client sends it chunked.
		req, err := http.NewRequest("POST", e.srv.URL+"/x", io.MultiReader(strings.NewReader(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", key)
		res, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	if res := post("fits", strings.Repeat("x", 16)); res.StatusCode != http.StatusCreated {
		t.Fatalf("chunked body of exactly max_request_body: got %d, want 201", res.StatusCode)
	}
	if b, _ := io.ReadAll(e.up.last().Body); string(b) != strings.Repeat("x", 16) {
		t.Errorf("upstream got body %q, want the 16 bytes sent", b)
	}
	if res := post("over", strings.Repeat("x", 17)); res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked body one byte over max_request_body: got %d, want 413", res.StatusCode)
	}
}

func TestFingerprintMismatch(t *testing.T) {
	e := newEnv(t, nil)
	e.do(t, "POST", "/x", "k", `{"a":1}`)
	for name, args := range map[string][]string{
		"body":         {"POST", "/x", `{"a":2}`},
		"path":         {"POST", "/y", `{"a":1}`},
		"query":        {"POST", "/x?q=1", `{"a":1}`},
		"method":       {"PUT", "/x", `{"a":1}`},
		"content type": {"POST", "/x", `{"a":1}`, "Content-Type", "text/plain"},
	} {
		t.Run(name, func(t *testing.T) {
			r := e.do(t, args[0], args[1], "k", args[2], args[3:]...)
			if r.StatusCode != http.StatusUnprocessableEntity || r.problemType() != "payload-mismatch" {
				t.Fatalf("got %d %s, want 422 payload-mismatch", r.StatusCode, r.body)
			}
		})
	}
	if e.up.calls.Load() != 1 {
		t.Fatalf("executions = %d, want 1", e.up.calls.Load())
	}
}

func TestScopeHeadersSeparateClients(t *testing.T) {
	e := newEnv(t, nil)
	a := e.do(t, "POST", "/x", "shared", "{}", "Authorization", "Bearer alice")
	b := e.do(t, "POST", "/x", "shared", "{}", "Authorization", "Bearer bob")
	if b.replayed() || a.body == b.body || e.up.calls.Load() != 2 {
		t.Fatalf("bob was replayed alice's response (executions %d)", e.up.calls.Load())
	}
	if r := e.do(t, "POST", "/x", "shared", "{}", "Authorization", "Bearer alice"); !r.replayed() || r.body != a.body {
		t.Fatalf("alice's retry: replayed=%v body %q, want her own response", r.replayed(), r.body)
	}
}

// A default policy that sets only some fields is the operator's, checked as
// it is: only the zero Policy stands for DefaultPolicy().
func TestPartialDefaultPolicyIsNotReplaced(t *testing.T) {
	st := newFlaky(t)
	up := newUpstream(t, nil)
	partial := Policy{KeySources: []KeySource{{Kind: KeyFromHeader, Name: "X-Request-Key"}}}
	if _, err := New(Options{Upstream: up.url(t), Store: st, Default: partial}); err == nil {
		t.Fatal("New accepted a default policy of key_sources alone (no methods, no ttl)")
	}
	if _, err := New(Options{Upstream: up.url(t), Store: st}); err != nil {
		t.Fatalf("New with the zero default policy: %v", err)
	}
}

func TestNewRejectsImpossiblePolicies(t *testing.T) {
	st := newFlaky(t)
	up := newUpstream(t, nil)
	for name, change := range map[string]func(*Policy){
		"zero lock_ttl":      func(p *Policy) { p.LockTTL = 0 },
		"lock_ttl over ttl":  func(p *Policy) { p.LockTTL = 2 * p.TTL },
		"wait without bound": func(p *Policy) { p.Concurrent, p.WaitTimeout = ConcurrentWait, 0 },
		"no header":          func(p *Policy) { p.Header = "" },
	} {
		t.Run(name, func(t *testing.T) {
			p := DefaultPolicy()
			change(&p)
			if _, err := New(Options{Upstream: up.url(t), Store: st, Default: DefaultPolicy(), Routes: []Route{{Pattern: "/x/", Policy: p}}}); err == nil {
				t.Fatal("New accepted the policy")
			}
		})
	}
}

// A response is delivered with the header section the upstream sent: an
// upstream answer without Content-Type gains none, neither when executed
// nor when replayed (net/http's server would sniff one), nor unkeyed.
func TestResponsesGainNoContentTypeTheUpstreamDidNotSend(t *testing.T) {
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil // the upstream's own server must not sniff either
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "<html>plain bytes</html>")
	})
	for _, c := range []struct {
		name, key string
		replayed  bool
	}{{"executed", "k-1", false}, {"replayed", "k-1", true}, {"unkeyed", "", false}} {
		r := e.do(t, "POST", "/x", c.key, `{}`)
		if r.replayed() != c.replayed || r.body != "<html>plain bytes</html>" {
			t.Fatalf("%s: replayed=%v body %q", c.name, r.replayed(), r.body)
		}
		if v, ok := r.Header["Content-Type"]; ok {
			t.Errorf("%s response carries Content-Type %q, which the upstream did not send", c.name, v)
		}
	}
}
