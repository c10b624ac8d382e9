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
		acceptAsync(w, other.URL+"/.well-known/idempotency/s1")
	}))
	t.Cleanup(front.Close)
	handedOverUnpolled(t, front.URL, other, &polled, http.StatusAccepted)
}

// A redirect to another origin does not move the status URL's origin there:
// the redirect is the answer, handed over (TestRedirectIsTheAnswerNotFollowedWithTheKey),
// so neither the request nor a poll with its Authorization reaches the
// other origin.
func TestStatusURLAfterARedirectToAnotherOriginIsNotPolled(t *testing.T) {
	var polled atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		polled.Add(1)
		acceptAsync(w, "/.well-known/idempotency/s1")
	}))
	t.Cleanup(other.Close)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(front.Close)
	handedOverUnpolled(t, front.URL, other, &polled, http.StatusTemporaryRedirect)
}

// handedOverUnpolled sends an authorised charge to front, whose answer
// (want, a 202 naming a status URL on other, or a redirect there) the
// client hands over, and checks that no poll reached other (counted in
// polled).
func handedOverUnpolled(t *testing.T, front string, other *httptest.Server, polled *atomic.Int32, want int) {
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
	if resp.StatusCode != want {
		t.Errorf("status %d, want the %d itself", resp.StatusCode, want)
	}
	if n := polled.Load(); n != 0 {
		t.Errorf("%d poll(s) reached the other origin", n)
	}
}

// A status URL whose request's key was released (the upstream answered a
// release status, say 503 "not processed") answers what the request would
// have been told, marked released: the client sends the request again with
// its key, and the operation runs once.
func TestRespondAsyncResendsARequestWhoseKeyWasReleased(t *testing.T) {
	u := &upstream{}
	u.steps = []http.HandlerFunc{status(http.StatusServiceUnavailable, "Retry-After", "0"), u.execute}
	base := startAsyncProxy(t, startUpstream(t, u))
	rt := &recordingTransport{base: http.DefaultTransport}
	var released atomic.Int32
	c := &Client{RespondAsync: true, MaxPolls: 5000, HTTP: &http.Client{Transport: rt},
		OnRetry: func(r Retry) {
			if r.StatusCode == http.StatusServiceUnavailable {
				released.Add(1)
			}
		},
		sleep: func(ctx context.Context, d time.Duration) error { return (&Client{}).wait(ctx, time.Millisecond) }}
	resp, err := c.Do(t.Context(), newCharge(t, base, "amount=7"))
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if body := readAll(t, resp); resp.StatusCode != http.StatusCreated || body != "execution 1 of amount=7" {
		t.Fatalf("%d %q, want the one execution's 201", resp.StatusCode, body)
	}
	if n := u.executions.Load(); n != 1 {
		t.Errorf("executions = %d, want 1", n)
	}
	if n := u.calls.Load(); n != 2 {
		t.Errorf("upstream calls = %d, want 2: the released one and the resend", n)
	}
	if released.Load() != 1 {
		t.Errorf("retries on the released answer = %d, want 1", released.Load())
	}
	keys := rt.gotKeys()
	if keys[0] == "" || keys[len(keys)-1] != "" {
		t.Fatalf("keys %q: want the request's first and a keyless poll last", keys)
	}
	resent := 0
	for _, k := range keys[1:] {
		if k == keys[0] {
			resent++
		} else if k != "" {
			t.Errorf("sent with key %q, want %q", k, keys[0])
		}
	}
	if resent != 1 {
		t.Errorf("the request was sent again %d times with its key, want 1", resent)
	}
}

// acceptAsync answers as the proxy does a request it runs asynchronously:
// 202, its status URL at location.
func acceptAsync(w http.ResponseWriter, location string) {
	w.Header().Set("Location", location)
	w.Header().Set("Preference-Applied", "respond-async")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusAccepted)
}

// asyncServer accepts every POST, counted in posts, with its status URL at
// /.well-known/idempotency/s1, and answers every other request with poll.
func asyncServer(t *testing.T, posts *atomic.Int32, poll http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			poll(w, r)
			return
		}
		posts.Add(1)
		acceptAsync(w, "/.well-known/idempotency/s1")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A poll answered status-unknown (an unknown or expired status URL) is the
// end: the request is not sent again, however its key may have gone.
func TestRespondAsyncStopsOnAnUnknownStatusURL(t *testing.T) {
	var posts atomic.Int32
	srv := asyncServer(t, &posts, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"type":"` + ProblemStatusUnknown + `","status":404}`))
	})
	c := &Client{RespondAsync: true, sleep: func(context.Context, time.Duration) error { return nil }}
	_, err := c.Do(t.Context(), newCharge(t, srv, "amount=7"))
	var pe *ProblemError
	if !errors.As(err, &pe) || pe.Problem.Type != ProblemStatusUnknown {
		t.Fatalf("Do: %v, want a ProblemError status-unknown", err)
	}
	if n := posts.Load(); n != 1 {
		t.Errorf("the request was sent %d times, want once", n)
	}
}

// A poll answered 503 without the released mark (the store could not be
// read, say) is polled again: only the mark frees the key for a resend.
func TestRespondAsyncPollsAgainOnAnUnmarked503(t *testing.T) {
	var posts, gets atomic.Int32
	srv := asyncServer(t, &posts, func(w http.ResponseWriter, r *http.Request) {
		if gets.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set(HeaderReplayed, "true")
		w.WriteHeader(http.StatusCreated)
	})
	c := &Client{RespondAsync: true, sleep: func(context.Context, time.Duration) error { return nil }}
	resp, err := c.Do(t.Context(), newCharge(t, srv, "amount=7"))
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || posts.Load() != 1 || gets.Load() != 2 {
		t.Errorf("%d after %d request(s) and %d poll(s), want the 201 after 1 and 2", resp.StatusCode, posts.Load(), gets.Load())
	}
}
