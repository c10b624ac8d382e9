package proxy

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestShadowForwardsABodyOverTheLimitWhole sends a body over
// max_request_body, of unknown length (chunked), to a shadow route: the
// proxy has read the first part of it before it knew, and the upstream
// still gets all of it.
func TestShadowForwardsABodyOverTheLimitWhole(t *testing.T) {
	var got string
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = string(b)
		w.WriteHeader(http.StatusCreated)
	}, withPolicy(func(p *Policy) { p.MaxRequestBody, p.Mode = 16, ModeShadow }))
	body := strings.Repeat("x", 40)
	req, err := http.NewRequest("POST", e.srv.URL+"/x", io.MultiReader(strings.NewReader(body))) // no length: chunked
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", "k")
	res, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("status %d, want the upstream's 201", res.StatusCode)
	}
	if got != body {
		t.Errorf("upstream got %q, want the whole body %q", got, body)
	}
	if n := testutil.ToFloat64(e.handler.metrics.shadow.WithLabelValues(defaultRoute, string(WouldTooLarge))); n != 1 {
		t.Errorf("shadow_total{would=too_large} = %v, want 1", n)
	}
}

// TestShadowDoesNotWaitForAKeyInFlight holds the first request of a key
// upstream under concurrent: wait: a duplicate on a shadow route is
// forwarded at once, and counted as the replay enforce would have waited
// for, not as a conflict.
func TestShadowDoesNotWaitForAKeyInFlight(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{}, 2)
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		if r.Header.Get("X-Hold") == "1" {
			<-release
		}
		w.WriteHeader(http.StatusCreated)
	}, withPolicy(func(p *Policy) { p.Concurrent, p.WaitTimeout, p.Mode = ConcurrentWait, time.Hour, ModeShadow }))
	unhold := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unhold)
	first, dup := make(chan *response, 1), make(chan *response, 1)
	go func() { first <- e.do(t, "POST", "/x", "k", "{}", "X-Hold", "1") }()
	<-arrived
	go func() { dup <- e.do(t, "POST", "/x", "k", "{}") }()
	// The duplicate reaches the upstream while the first is still held
	// there; waiting, it would not before wait_timeout.
	select {
	case <-arrived:
	case <-time.After(time.Minute):
		t.Fatal("the duplicate did not reach the upstream while the first was in flight: it waited")
	}
	if r := <-dup; r.StatusCode != http.StatusCreated {
		t.Fatalf("duplicate: status %d %s, want the upstream's 201", r.StatusCode, r.body)
	}
	unhold()
	if r := <-first; r.StatusCode != http.StatusCreated {
		t.Fatalf("first: status %d, want 201", r.StatusCode)
	}
	for would, want := range map[Would]float64{WouldReplay: 1, WouldConflict: 0} {
		if n := testutil.ToFloat64(e.handler.metrics.shadow.WithLabelValues(defaultRoute, string(would))); n != want {
			t.Errorf("shadow_total{would=%s} = %v, want %v", would, n, want)
		}
	}
}

// A shadow route whose store cannot take the key forwards the request,
// its body whole, as a plain reverse proxy would, and counts it as a
// request forwarded unprotected (store_unavailable_bypassed), what enforce
// would have done under fail_open, not as a passthrough.
func TestShadowRouteWithTheStoreDownForwardsTheRequestUnprotected(t *testing.T) {
	st := newFlaky(t)
	e := newEnv(t, nil, withStore(st), withPolicy(func(p *Policy) { p.Mode = ModeShadow }))
	st.down.Store(true)
	r := e.do(t, "POST", "/x", "k", `{"v":1}`)
	if r.StatusCode != http.StatusCreated || e.up.calls.Load() != 1 || !strings.Contains(r.body, `{\"v\":1}`) {
		t.Fatalf("got %d %s after %d executions, want the upstream's 201 to the whole body", r.StatusCode, r.body, e.up.calls.Load())
	}
	if n := testutil.ToFloat64(e.handler.metrics.shadow.WithLabelValues(defaultRoute, string(WouldStoreUnavailable))); n != 1 {
		t.Errorf("shadow_total{would=store_unavailable} = %v, want 1", n)
	}
	if got := e.outcomes(defaultRoute, OutcomeStoreBypassed); got != 1 {
		t.Errorf("store_unavailable_bypassed = %v, want 1", got)
	}
	if got := e.outcomes(defaultRoute, OutcomePassthrough); got != 0 {
		t.Errorf("passthrough = %v, want 0", got)
	}
}
