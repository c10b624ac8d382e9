package proxy

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// manualClock is a clock for the store alone.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func tombstoneEnv(t *testing.T, reject bool) (*env, *manualClock, *store.Tombstones) {
	t.Helper()
	clock := &manualClock{now: time.Now()}
	mem := memory.New(memory.Options{Now: clock.Now})
	ts := store.WithTombstones(mem, clock.Now)
	ts.Check(true)
	t.Cleanup(func() { ts.Close() })
	e := newEnv(t, nil, withStore(ts), withPolicy(func(p *Policy) {
		p.TTL, p.LockTTL, p.ExpiredKeyWindow = time.Hour, time.Minute, 24*time.Hour
		if reject {
			p.ExpiredKeys = ExpiredReject
		}
	}))
	return e, clock, ts
}

// Under expired_keys: reject, a retry after its record expired gets 410
// key-expired, saying when, without reaching the upstream, for the whole
// window; after it the key is new and executes again.
func TestExpiredKeyIsRefusedWithinItsWindow(t *testing.T) {
	e, clock, _ := tombstoneEnv(t, true)
	if r := e.do(t, "POST", "/x", "k-1", `{}`); r.StatusCode != http.StatusCreated || r.replayed() {
		t.Fatalf("first: %d replayed=%v", r.StatusCode, r.replayed())
	}
	clock.advance(time.Hour + time.Second)
	for i := range 2 {
		r := e.do(t, "POST", "/x", "k-1", `{}`)
		if r.StatusCode != http.StatusGone || r.problemType() != "key-expired" {
			t.Fatalf("retry %d after ttl: %d %s, want 410 key-expired", i, r.StatusCode, r.body)
		}
		if !strings.Contains(r.body, "expired at ") {
			t.Errorf("detail does not say when the key expired: %s", r.body)
		}
	}
	if got := e.up.calls.Load(); got != 1 {
		t.Fatalf("upstream executions = %d, want 1", got)
	}
	if got := e.outcomes(defaultRoute, OutcomeExpiredKey); got != 2 {
		t.Errorf("expired_key outcomes = %v, want 2", got)
	}
	clock.advance(24 * time.Hour)
	if r := e.do(t, "POST", "/x", "k-1", `{}`); r.StatusCode != http.StatusCreated || r.replayed() {
		t.Fatalf("after the window: %d %s, want the key executed again", r.StatusCode, r.body)
	}
	if got := e.up.calls.Load(); got != 2 {
		t.Fatalf("upstream executions = %d, want 2", got)
	}
}

// Under forget, the default, a key whose record expired executes again,
// a tombstone left by an earlier reject included.
func TestExpiredKeyIsForgottenByDefault(t *testing.T) {
	e, clock, _ := tombstoneEnv(t, false)
	e.do(t, "POST", "/x", "k-1", `{}`)
	clock.advance(time.Hour + time.Second)
	if r := e.do(t, "POST", "/x", "k-1", `{}`); r.StatusCode != http.StatusCreated || r.replayed() {
		t.Fatalf("after ttl: %d %s, want executed again", r.StatusCode, r.body)
	}

	rej, clock, _ := tombstoneEnv(t, true)
	rej.do(t, "POST", "/x", "k-2", `{}`)
	clock.advance(time.Hour + time.Second)
	def := DefaultPolicy()
	def.TTL, def.LockTTL = time.Hour, time.Minute
	if err := rej.handler.SetRoutes(def, nil); err != nil {
		t.Fatal(err)
	}
	if r := rej.do(t, "POST", "/x", "k-2", `{}`); r.StatusCode != http.StatusCreated || r.replayed() {
		t.Fatalf("after a reload to forget: %d %s, want executed again", r.StatusCode, r.body)
	}
}

// Forgetting an expired key deletes its tombstone first; when the store
// cannot, the request gets what on_store_error gives any request the store
// cannot take (here fail_closed: 503), and is not executed.
func TestExpiredKeyTheStoreCannotForgetIsAStoreFailure(t *testing.T) {
	rej, clock, ts := tombstoneEnv(t, true)
	rej.do(t, "POST", "/x", "k-1", `{}`)
	clock.advance(time.Hour + time.Second)
	st := &deleteFailing{Tombstones: ts}
	st.failures.Store(1)
	e := newEnv(t, nil, withStore(st), withPolicy(func(p *Policy) { p.TTL, p.LockTTL = time.Hour, time.Minute }))
	r := e.do(t, "POST", "/x", "k-1", `{}`)
	if r.StatusCode != http.StatusServiceUnavailable || r.problemType() != "store-unavailable" {
		t.Fatalf("got %d %s, want 503 store-unavailable", r.StatusCode, r.body)
	}
	if got := e.up.calls.Load(); got != 0 {
		t.Fatalf("upstream executions = %d, want 0", got)
	}
}

// deleteFailing is a store whose next Deletes fail as unavailable.
type deleteFailing struct {
	*store.Tombstones
	failures atomic.Int64
}

func (d *deleteFailing) Delete(ctx context.Context, key string) error {
	if d.failures.Add(-1) >= 0 {
		return store.ErrUnavailable
	}
	return d.Tombstones.Delete(ctx, key)
}
