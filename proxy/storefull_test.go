package proxy

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution/executiontest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// fullStore is a memory store that can run out of room the way the stores
// report it: Begin or Complete fail with an error matching store.ErrFull,
// the lease staying held.
type fullStore struct {
	Store
	beginFull atomic.Bool // Begin of a new key fails
	noBody    atomic.Bool // Complete fails for records with a body
	noRoom    atomic.Bool // Complete fails for every record
	extends   chan struct{}
}

// newFullStore is a fullStore whose leases run on now (time.Now when nil).
func newFullStore(t *testing.T, now func() time.Time) *fullStore {
	st := memory.New(memory.Options{Now: now})
	t.Cleanup(func() { st.Close() })
	return &fullStore{Store: st, extends: make(chan struct{}, 1024)}
}

func errFull(op string) error { return fmt.Errorf("%s: store at its bound: %w", op, store.ErrFull) }

func (f *fullStore) Begin(ctx context.Context, key string, l store.Lease, ttl time.Duration) (store.BeginResult, error) {
	if f.beginFull.Load() {
		return store.BeginResult{}, errFull("begin")
	}
	return f.Store.Begin(ctx, key, l, ttl)
}

func (f *fullStore) Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	if f.noRoom.Load() || f.noBody.Load() && len(rec.Body) > 0 {
		return errFull("complete")
	}
	return f.Store.Complete(ctx, key, token, rec, ttl)
}

func (f *fullStore) Extend(ctx context.Context, key, token string, lease time.Duration) error {
	err := f.Store.Extend(ctx, key, token, lease)
	select {
	case f.extends <- struct{}{}:
	default:
	}
	return err
}

// A store with no room for a new key answers store-full under fail_closed
// (not "unavailable"), and forwards unprotected under fail_open.
func TestFullStoreAnswersStoreFull(t *testing.T) {
	t.Run("fail closed", func(t *testing.T) {
		st := newFullStore(t, nil)
		st.beginFull.Store(true)
		e := newEnv(t, nil, withStore(st))
		r := e.do(t, "POST", "/x", "k", "{}")
		if r.StatusCode != http.StatusServiceUnavailable || r.problemType() != "store-full" || r.Header.Get("Retry-After") == "" {
			t.Fatalf("got %d %s (Retry-After %q), want 503 store-full with Retry-After", r.StatusCode, r.body, r.Header.Get("Retry-After"))
		}
		if e.up.calls.Load() != 0 {
			t.Fatal("upstream called while the store was full under fail_closed")
		}
	})
	t.Run("fail open", func(t *testing.T) {
		st := newFullStore(t, nil)
		st.beginFull.Store(true)
		e := newEnv(t, nil, withStore(st), withPolicy(func(p *Policy) { p.OnStoreError = true }))
		if r := e.do(t, "POST", "/x", "k", "{}"); r.StatusCode != http.StatusCreated || e.up.calls.Load() != 1 {
			t.Fatalf("got %d, executions %d; want the request forwarded", r.StatusCode, e.up.calls.Load())
		}
		if got := e.outcomes(defaultRoute, OutcomeStoreBypassed); got != 1 {
			t.Errorf("store_unavailable_bypassed = %v, want 1", got)
		}
	})
}

// A store with no room for a response's body records its status and
// headers instead: the retry is a replay marked Idempotent-Body-Omitted,
// never a second execution.
func TestFullStoreRecordsResponseWithoutBody(t *testing.T) {
	st := newFullStore(t, nil)
	st.noBody.Store(true)
	e := newEnv(t, nil, withStore(st))
	first := e.do(t, "POST", "/x", "k", "{}")
	if first.StatusCode != http.StatusCreated || first.body == "" {
		t.Fatalf("first: %d %q, want the whole response", first.StatusCode, first.body)
	}
	r := e.retryUntilSettled(t, "k")
	if !r.replayed() || r.StatusCode != http.StatusCreated || r.body != "" ||
		r.Header.Get("Idempotent-Body-Omitted") != "true" || r.Header.Get("Content-Length") != "0" ||
		r.Header.Get("X-Execution") != first.Header.Get("X-Execution") {
		t.Fatalf("retry: %d replayed=%v omitted=%q CL=%q body %q; want the recorded status and headers without body",
			r.StatusCode, r.replayed(), r.Header.Get("Idempotent-Body-Omitted"), r.Header.Get("Content-Length"), r.body)
	}
	if got := e.up.calls.Load(); got != 1 {
		t.Fatalf("executions = %d, want 1", got)
	}
	if got := testutil.ToFloat64(e.handler.metrics.bodyOmitted[omitStoreFull]); got != 1 {
		t.Errorf("records_body_omitted_total{reason=store_full} = %v, want 1", got)
	}
}

// fullOnce is a memory store whose first Complete finds it full.
type fullOnce struct {
	Store
	completes atomic.Int64
}

func (f *fullOnce) Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	if f.completes.Add(1) == 1 {
		return errFull("complete")
	}
	return f.Store.Complete(ctx, key, token, rec, ttl)
}

// A response with no body has no body to leave out: a store full for its
// record holds the key until the record fits, and the record is the
// response as it was, not one marked as having lost its body.
func TestFullStoreNeverMarksAnEmptyBodyOmitted(t *testing.T) {
	mem := memory.New(memory.Options{})
	t.Cleanup(func() { mem.Close() })
	st := &fullOnce{Store: mem}
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}, withStore(st))
	if first := e.do(t, "POST", "/x", "k", "{}"); first.StatusCode != http.StatusCreated {
		t.Fatalf("first: %d, want the upstream's 201", first.StatusCode)
	}
	if err := e.handler.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := e.do(t, "POST", "/x", "k", "{}")
	if !r.replayed() || r.StatusCode != http.StatusCreated || r.Header.Get("Idempotent-Body-Omitted") != "" {
		t.Fatalf("retry: %d replayed=%v omitted=%q, want the recorded 201, nothing said omitted", r.StatusCode, r.replayed(), r.Header.Get("Idempotent-Body-Omitted"))
	}
	if got := testutil.ToFloat64(e.handler.metrics.bodyOmitted[omitStoreFull]); got != 0 {
		t.Errorf("records_body_omitted_total{reason=store_full} = %v, want 0", got)
	}
}

// A store with no room even for a bodiless record keeps the key locked:
// the lease is renewed past lock_ttl (retries get 409, nobody executes
// again) until the record fits, then the retry is a replay. The handler
// and the store share a fake clock, moved to each renewal once it is
// armed: a busy machine delays a renewal, but cannot let the lease run out
// before it.
func TestFullStoreKeepsKeyLockedUntilRecorded(t *testing.T) {
	var logs lockedBuffer
	clock := executiontest.NewFakeClock()
	st := newFullStore(t, clock.Now)
	st.noRoom.Store(true)
	const lockTTL = 150 * time.Millisecond
	e := newEnv(t, nil, withStore(st), withLog(&logs), withPolicy(func(p *Policy) { p.LockTTL = lockTTL }))
	e.handler.clock = clock
	first := e.do(t, "POST", "/x", "k", "{}")
	if first.StatusCode != http.StatusCreated {
		t.Fatalf("first: %d, want the response delivered", first.StatusCode)
	}
	// Three lock_ttls pass, a renewal at a time: an unrenewed lease would
	// have expired long before their end.
	renewals := 0
	for end := clock.Now().Add(3 * lockTTL); clock.Now().Before(end); renewals++ {
		clock.AdvanceToNext(t, lockTTL, "the held key's next renewal")
		select {
		case <-st.extends:
		case <-time.After(10 * time.Second): // a bound on a hang, not a timing threshold
			t.Fatalf("the held lease was renewed %d times, then not when its next renewal was due", renewals)
		}
	}
	if r := e.do(t, "POST", "/x", "k", "{}"); r.StatusCode != http.StatusConflict {
		t.Fatalf("retry while the store is full, after %d renewals: %d, want 409", renewals, r.StatusCode)
	}
	// Wait (shutdown) still ends at its context.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.handler.Wait(ctx); err == nil {
		t.Fatal("Wait returned nil while a key was still held")
	}
	st.noRoom.Store(false)
	clock.AdvanceToNext(t, lockTTL, "the next try at recording the held key")
	// A bound on a hang, not a timing threshold.
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.handler.Wait(ctx); err != nil {
		t.Fatalf("the key was not recorded once the store had room: %v", err)
	}
	r := e.do(t, "POST", "/x", "k", "{}")
	// The record that waited for room is the one without the body.
	if !r.replayed() || r.StatusCode != first.StatusCode || r.Header.Get("X-Execution") != first.Header.Get("X-Execution") ||
		r.Header.Get("Idempotent-Body-Omitted") != "true" {
		t.Fatalf("retry after room returned: %d replayed=%v omitted=%q, want the replay of the recorded status and headers",
			r.StatusCode, r.replayed(), r.Header.Get("Idempotent-Body-Omitted"))
	}
	if got := testutil.ToFloat64(e.handler.metrics.bodyOmitted[omitStoreFull]); got != 1 {
		t.Errorf("records_body_omitted_total{reason=store_full} = %v, want 1", got)
	}
	if got := e.up.calls.Load(); got != 1 {
		t.Fatalf("executions = %d, want 1", got)
	}
	if got := testutil.ToFloat64(e.handler.metrics.lockLost); got != 0 {
		t.Errorf("lock lost = %v, want 0", got)
	}
	if got := len(logs.lines(t, "store full")); got != 1 {
		t.Errorf("%d error lines about the held key, want exactly 1", got)
	}
}
