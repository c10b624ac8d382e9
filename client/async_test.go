package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/proxy"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// startAsyncProxy is the proxy handler with async: allow in front of
// upstream.
func startAsyncProxy(t *testing.T, upstream string) string {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New(memory.Options{})
	t.Cleanup(func() { _ = st.Close() })
	pol := proxy.DefaultPolicy()
	pol.Async = proxy.AsyncAllow
	h, err := proxy.New(proxy.Options{Upstream: u, Store: st, Default: pol, AsyncSecret: []byte("0123456789abcdef0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// heldUpstream executes the operation once release is called; a test
// calls it in a cleanup registered after the upstream's, which waits for
// its handlers.
func heldUpstream() (u *upstream, release func()) {
	ch := make(chan struct{})
	u = &upstream{}
	u.steps = []http.HandlerFunc{func(w http.ResponseWriter, r *http.Request) {
		<-ch
		u.execute(w, r)
	}}
	var once sync.Once
	return u, func() { once.Do(func() { close(ch) }) }
}

func TestRespondAsyncFollowsTheStatusURLToTheOneAnswer(t *testing.T) {
	u, release := heldUpstream()
	base := startAsyncProxy(t, startUpstream(t, u))
	t.Cleanup(release)
	var mu sync.Mutex
	var waits []time.Duration
	c := &Client{RespondAsync: true, MaxPolls: 5000, sleep: func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		waits = append(waits, d)
		if len(waits) == 2 {
			release() // one poll saw 202 while the upstream held the request
		}
		mu.Unlock()
		return (&Client{}).wait(ctx, time.Millisecond)
	}}
	req := newCharge(t, base, "amount=7")
	req.Header.Set("Authorization", "Bearer alice")
	resp, err := c.Do(t.Context(), req)
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusCreated || !Replayed(resp) || body != "execution 1 of amount=7" {
		t.Fatalf("%d %q replayed=%v, want the one execution's 201", resp.StatusCode, body, Replayed(resp))
	}
	if n := u.calls.Load(); n != 1 {
		t.Errorf("upstream calls = %d, want 1", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(waits) < 2 || waits[0] != time.Second || waits[1] != time.Second {
		t.Errorf("waits %v: want each the 202's Retry-After of 1s", waits)
	}
}

func TestRespondAsyncPollsAreBounded(t *testing.T) {
	u, release := heldUpstream()
	base := startAsyncProxy(t, startUpstream(t, u))
	t.Cleanup(release)
	c := &Client{RespondAsync: true, MaxPolls: 3, sleep: func(context.Context, time.Duration) error { return nil }}
	_, err := c.Do(t.Context(), newCharge(t, base, "amount=7"))
	var re *RetryError
	if !errors.As(err, &re) || re.Attempts != 3 || re.StatusCode != http.StatusAccepted {
		t.Fatalf("Do: %v, want a RetryError after 3 polls answered 202", err)
	}
}

// The proxy's status URL is on the origin the request went to: a 202 whose
// Location names another host is handed over as the answer, never polled
// with the request's headers (its Authorization among them).
func TestStatusURLOnAnotherOriginIsNotPolled(t *testing.T) {
	var polled atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		polled.Add(1)
		w.WriteHeader(http.StatusTeapot)
	}))
	t.Cleanup(other.Close)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", other.URL+"/.well-known/idempotency/s1")
		w.Header().Set("Preference-Applied", "respond-async")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(front.Close)
	handedOverUnpolled(t, front.URL, other, &polled)
}

// A redirect to another origin does not move the status URL's origin there:
// http.Client follows it without the request's Authorization, and polling
// the 202 it got there would send it.
func TestStatusURLAfterARedirectToAnotherOriginIsNotPolled(t *testing.T) {
	var polled atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			polled.Add(1)
			w.WriteHeader(http.StatusTeapot)
			return
		}
		w.Header().Set("Location", "/.well-known/idempotency/s1")
		w.Header().Set("Preference-Applied", "respond-async")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(other.Close)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(front.Close)
	handedOverUnpolled(t, front.URL, other, &polled)
}

// handedOverUnpolled sends an authorised charge to front, whose 202 names
// a status URL on other, and checks that the client hands the 202 over
// and that no poll reached other (counted in polled).
func handedOverUnpolled(t *testing.T, front string, other *httptest.Server, polled *atomic.Int32) {
	t.Helper()
	c := &Client{RespondAsync: true, sleep: func(context.Context, time.Duration) error { return nil }}
	req := newCharge(t, front, "amount=7")
	req.Header.Set("Authorization", "Bearer alice")
	resp, err := c.Do(t.Context(), req)
	if err != nil {
		t.Fatalf("Do: %v, want the 202 handed over", err)
	}
	_ = resp.Body.Close()
	other.Close() // waits for any poll it got
	if resp.StatusCode != http.StatusAccepted {
		t.Errorf("status %d, want the 202 itself", resp.StatusCode)
	}
	if n := polled.Load(); n != 0 {
		t.Errorf("%d poll(s) reached the other origin", n)
	}
}
