package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// TestReleaseAfterTheStoreForgotTheKeyLeavesTheNextOwnersMarker: a proxy
// whose key a Redis restart forgot while the upstream ran its charge (no
// renewal due yet to find it) gets "not processed" (503) for it, and
// releases the key. By then the key is another proxy's, which marked it
// before sending its own charge, and is SIGKILLed while the service runs
// it. The marker that proxy wrote stays: the key's next request asks the
// service and gets the charge, never a second one.
func TestReleaseAfterTheStoreForgotTheKeyLeavesTheNextOwnersMarker(t *testing.T) {
	up := startNotProcessedThenHeld(t)
	srv := redistest.Start(t)
	cfg := func(lockTTL string) proxyConfig {
		return proxyConfig{
			Upstream:        up.srv.URL,
			UpstreamTimeout: 10 * time.Second,
			ShutdownTimeout: 10 * time.Second,
			RedisURL:        srv.URL(),
			Defaults:        map[string]string{"ttl": "5m", "lock_ttl": lockTTL},
			Routes: []routeConfig{{Match: "POST /v1/charges", Keys: map[string]string{
				"on_upstream_error": "reconcile",
				"reconcile":         `{request: "GET /v1/charges?idempotency_key={key}", after: 100ms, every: 500ms}`,
			}}},
		}
	}
	// The first proxy's lease is renewed after 20 s, long after this test
	// is done with it; the next owner's runs out 2 s after it is killed.
	first := startProxy(t, "first", cfg("60s"))
	next := startProxy(t, "next", cfg("2s"))
	c := newClient(t, 20*time.Second)
	const key = "forgotten-mid-call"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	answered := make(chan reply, 1)
	go func() { answered <- send(ctx, c, first.URL(), chargeRequest(key)) }()
	<-up.firstArrived
	srv.Kill()
	srv.Restart() // without persistence: the lease and its marker are gone

	// The next owner takes the key, marks it and sends its charge, which
	// the service commits and holds.
	go func() {
		for ctx.Err() == nil {
			select {
			case <-up.secondCommitted:
				return
			default:
			}
			send(ctx, c, next.URL(), chargeRequest(key)) // 503 while the store reconnects
		}
	}()
	select {
	case <-up.secondCommitted:
	case <-time.After(15 * time.Second):
		t.Fatalf("the next owner's charge never reached the service\nnext: %s", next.Logs())
	}
	close(up.answerFirst)
	if r := <-answered; r.Status != http.StatusServiceUnavailable {
		t.Fatalf("the first charge: %s %q, want the service's 503", r, r.Body)
	}
	// The first proxy left the key as it found it: it could not renew a
	// lease the store forgot.
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if !strings.Contains(first.Logs(), "could not prove the key still held before deleting its marker") {
			return errors.New("the first proxy has not decided about the marker it would delete")
		}
		return nil
	})
	next.Kill()

	r := sendUntilSettled(t, c, first.URL(), key, 15*time.Second, "409: the killed proxy's lease has not expired yet")
	if n := up.charges(key); n != 1 {
		t.Fatalf("charges = %d, want 1: the key was forwarded again, unmarked", n)
	}
	if r.Status != http.StatusOK || r.Header.Get("Idempotency-Reconciled") != "true" || !strings.Contains(r.Body, `"ch_1"`) {
		t.Fatalf("after the next owner was killed: %s %q, want its charge from the lookup", r, r.Body)
	}
}

// notProcessedThenHeld is a payment service: its first charge waits for
// answerFirst and answers 503 without committing (not processed); its
// second commits and then hangs until the test ends; any later one
// commits and answers. GET /v1/charges?idempotency_key=K answers the
// committed charge, 404 when there is none.
type notProcessedThenHeld struct {
	srv                                        *httptest.Server
	firstArrived, answerFirst, secondCommitted chan struct{}
	end                                        chan struct{}

	mu      sync.Mutex
	posts   int
	charged map[string]int // charges committed per key
}

func startNotProcessedThenHeld(t *testing.T) *notProcessedThenHeld {
	t.Helper()
	u := &notProcessedThenHeld{firstArrived: make(chan struct{}), answerFirst: make(chan struct{}),
		secondCommitted: make(chan struct{}), end: make(chan struct{}), charged: map[string]int{}}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	t.Cleanup(func() { close(u.end) }) // before the server closes
	return u
}

func (u *notProcessedThenHeld) serve(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	key := r.Header.Get("Idempotency-Key")
	if r.Method == http.MethodGet {
		key = r.URL.Query().Get("idempotency_key")
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if r.Method == http.MethodGet {
		if u.charged[key] == 0 {
			http.Error(w, `{"error":"no such charge"}`, http.StatusNotFound)
			return
		}
		fmt.Fprintf(w, `{"id":"ch_1","charges":%d}`, u.charged[key])
		return
	}
	u.posts++
	switch u.posts {
	case 1:
		close(u.firstArrived)
		u.mu.Unlock()
		<-u.answerFirst
		u.mu.Lock()
		w.WriteHeader(http.StatusServiceUnavailable)
	case 2:
		u.charged[key]++
		close(u.secondCommitted)
		u.mu.Unlock()
		<-u.end
		u.mu.Lock()
	default:
		u.charged[key]++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"ch_%d"}`, u.posts)
	}
}

// charges is how many charges key committed.
func (u *notProcessedThenHeld) charges(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.charged[key]
}
