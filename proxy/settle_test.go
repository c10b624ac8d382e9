package proxy

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution"
	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution/executiontest"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// slowFirstEnv is a handler on a memory store and a fake clock, with a
// lock_ttl of lockTTL, whose upstream blocks the request carrying X-First
// until release is closed, after saying so on arrived.
func slowFirstEnv(t *testing.T, lockTTL time.Duration, opts ...envOption) (e *env, clock *executiontest.FakeClock, arrived, release chan struct{}) {
	t.Helper()
	arrived, release = make(chan struct{}, 2), make(chan struct{})
	clock = executiontest.NewFakeClock()
	st := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { st.Close() })
	options := []envOption{withStore(st), withPolicy(func(p *Policy) { p.LockTTL = lockTTL })}
	e = newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-First") != "" { // only the first one blocks
			arrived <- struct{}{}
			<-release
		}
		w.Write([]byte("done"))
	}, append(options, opts...)...)
	e.handler.clock = clock
	return e, clock, arrived, release
}

// duplicatesConflictForFourLockTTLs lets four lock_ttl periods pass, a
// third at a time, and checks that a duplicate of the request holding k is
// refused with 409 after each: without renewal the lease would expire and
// the duplicate would execute again. On failure it releases the first.
func duplicatesConflictForFourLockTTLs(t *testing.T, e *env, clock *executiontest.FakeClock, lockTTL time.Duration, release chan struct{}) {
	t.Helper()
	for i := range 12 {
		clock.Advance(lockTTL / 3)
		if r := e.do(t, "POST", "/x", "k", "{}"); r.StatusCode != http.StatusConflict {
			close(release)
			t.Fatalf("duplicate after %d thirds of lock_ttl: got %d, want 409", i+1, r.StatusCode)
		}
	}
}

func TestLeaseRenewedWhileUpstreamIsSlow(t *testing.T) {
	const lockTTL = 30 * time.Second
	e, clock, arrived, release := slowFirstEnv(t, lockTTL)
	first := make(chan *response)
	go func() { first <- e.do(t, "POST", "/x", "k", "{}", "X-First", "1") }()
	<-arrived
	duplicatesConflictForFourLockTTLs(t, e, clock, lockTTL, release)
	close(release)
	<-first
	if e.up.calls.Load() != 1 {
		t.Fatalf("executions = %d, want 1", e.up.calls.Load())
	}
	if got := testutil.ToFloat64(e.handler.metrics.lockLost); got != 0 {
		t.Errorf("lock lost = %v, want 0", got)
	}
}

// When upstream.timeout comes before the lease's first renewal, the
// renewals start when it passes: the call goes on detached, and its lease
// must outlive lock_ttl as long as the call does.
func TestLeaseRenewedWhenTimeoutComesBeforeFirstRenewal(t *testing.T) {
	const lockTTL = 30 * time.Second
	e, clock, arrived, release := slowFirstEnv(t, lockTTL, func(o *Options) {
		o.UpstreamTimeout, o.MaxExecution = time.Second, time.Hour // before lock_ttl/3
	})
	first := make(chan *response)
	go func() { first <- e.do(t, "POST", "/x", "k", "{}", "X-First", "1") }()
	<-arrived
	clock.Advance(time.Second)
	if r := <-first; r.StatusCode != http.StatusGatewayTimeout {
		close(release)
		t.Fatalf("client past upstream.timeout: %d, want 504", r.StatusCode)
	}
	duplicatesConflictForFourLockTTLs(t, e, clock, lockTTL, release)
	close(release)
	if err := e.handler.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e.up.calls.Load() != 1 {
		t.Fatalf("executions = %d, want 1", e.up.calls.Load())
	}
}

// When upstream.timeout passes at the very moment the lease's first
// renewal is due (lock_ttl three times upstream.timeout), the renewals go
// on as on either side of it: the call goes on detached, and its lease
// outlives lock_ttl as long as the call does.
func TestLeaseRenewedWhenTimeoutComesAtTheFirstRenewal(t *testing.T) {
	const lockTTL = 3 * time.Second
	e, clock, arrived, release := slowFirstEnv(t, lockTTL, func(o *Options) {
		o.UpstreamTimeout, o.MaxExecution = lockTTL/3, time.Hour
	})
	first := make(chan *response)
	go func() { first <- e.do(t, "POST", "/x", "k", "{}", "X-First", "1") }()
	<-arrived
	clock.Advance(lockTTL / 3)
	if r := <-first; r.StatusCode != http.StatusGatewayTimeout {
		close(release)
		t.Fatalf("client past upstream.timeout: %d, want 504", r.StatusCode)
	}
	duplicatesConflictForFourLockTTLs(t, e, clock, lockTTL, release)
	close(release)
	if err := e.handler.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e.up.calls.Load() != 1 {
		t.Fatalf("executions = %d, want 1", e.up.calls.Load())
	}
}

// extendCounter counts the lease renewals that reach its store.
type extendCounter struct {
	Store
	n atomic.Int64
}

func (s *extendCounter) Extend(ctx context.Context, key, token string, ttl time.Duration) error {
	defer s.n.Add(1)
	return s.Store.Extend(ctx, key, token, ttl)
}

// The lease's first renewal is due a third of lock_ttl after the call
// started, also when upstream.timeout passed before it and started the
// renewals: the detached call renews on the same schedule as any other.
func TestFirstRenewalAfterTimeoutIsAThirdOfLockTTLAfterTheStart(t *testing.T) {
	const lockTTL = 30 * time.Second
	clock := executiontest.NewFakeClock()
	mem := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { mem.Close() })
	st := &extendCounter{Store: mem}
	e, _, arrived, release := slowFirstEnv(t, lockTTL, withStore(st), func(o *Options) {
		o.UpstreamTimeout, o.MaxExecution = time.Second, time.Hour // before lock_ttl/3
	})
	e.handler.clock = clock
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the servers close, on failure too
	first := make(chan *response)
	go func() { first <- e.do(t, "POST", "/x", "k", "{}", "X-First", "1") }()
	<-arrived
	clock.Advance(time.Second)
	if r := <-first; r.StatusCode != http.StatusGatewayTimeout {
		free()
		t.Fatalf("client past upstream.timeout: %d, want 504", r.StatusCode)
	}
	clock.Advance(lockTTL/3 - time.Second)
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if n := st.n.Load(); n != 1 {
			return fmt.Errorf("%d renewals a third of lock_ttl after the start, want 1", n)
		}
		return nil
	})
	free()
	if err := e.handler.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestLostLeaseIsCountedAndResponseDelivered(t *testing.T) {
	st := newFlaky(t)
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		st.lostAfterBegin.Store(true) // someone else took the key while we ran
		w.Write([]byte("mine"))
	}, withStore(st))
	r := e.do(t, "POST", "/x", "k", "{}")
	if r.StatusCode != http.StatusOK || r.body != "mine" {
		t.Fatalf("got %d %q, want the response delivered", r.StatusCode, r.body)
	}
	if got := testutil.ToFloat64(e.handler.metrics.lockLost); got != 1 {
		t.Fatalf("lock lost = %v, want 1", got)
	}
}

// A store that is down when the response comes back is retried in the
// background until the lease would expire: the retry is a replay, not a
// second execution.
func TestRecordingRetriedWhileStoreRecovers(t *testing.T) {
	st := newFlaky(t)
	st.completeFailures.Store(4) // about 50+100+200+400ms of outage
	e := newEnv(t, nil, withStore(st))
	first := e.do(t, "POST", "/x", "k", "{}")
	if first.StatusCode != http.StatusCreated {
		t.Fatalf("first: %d, want the response delivered at once", first.StatusCode)
	}
	r := e.retryUntilSettled(t, "k")
	if !r.replayed() || r.body != first.body || e.up.calls.Load() != 1 {
		t.Fatalf("retry: %d replayed=%v executions=%d, want the replay of the one execution", r.StatusCode, r.replayed(), e.up.calls.Load())
	}
	if err := e.handler.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A release that fails while the store blips is retried in the background:
// the key frees up well before lock_ttl, so the retry executes instead of
// getting 409 for the whole lease.
func TestReleaseRetriedWhileStoreRecovers(t *testing.T) {
	st := newFlaky(t)
	st.releaseFailures.Store(2)
	var calls atomic.Int64
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // a release status
			return
		}
		w.Write([]byte("done"))
	}, withStore(st), withPolicy(func(p *Policy) { p.LockTTL = time.Hour }))
	if r := e.do(t, "POST", "/x", "k", "{}"); r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("first: %d, want the upstream's 503", r.StatusCode)
	}
	r := e.retryUntilSettled(t, "k")
	if r.StatusCode != http.StatusOK || r.body != "done" || r.replayed() {
		t.Fatalf("retry: %d %q replayed=%v, want a fresh execution", r.StatusCode, r.body, r.replayed())
	}
	// Each failed try is a store error; the one that succeeded is not.
	if got := testutil.ToFloat64(e.handler.metrics.storeErrors.WithLabelValues(opRelease.String())); got != 2 {
		t.Errorf("store_errors_total{operation=release} = %v, want 2", got)
	}
}

// The lost-lease warning says what happens to the response by when the loss
// is found: a renewal finds it before any response exists (an operator
// deleted the key while the upstream ran), a completion after delivery.
func TestLostLeaseWarningSaysWhenItWasFound(t *testing.T) {
	t.Run("renewal", func(t *testing.T) {
		var logs lockedBuffer
		arrived, release := make(chan struct{}), make(chan struct{})
		const lockTTL = 30 * time.Second
		clock := executiontest.NewFakeClock()
		st := memory.New(memory.Options{Now: clock.Now})
		t.Cleanup(func() { st.Close() })
		e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
			close(arrived)
			<-release
			w.Write([]byte("done"))
		}, withStore(st), withLog(&logs), withPolicy(func(p *Policy) { p.LockTTL = lockTTL }))
		e.handler.clock = clock
		first := make(chan *response)
		go func() { first <- e.do(t, "POST", "/x", "k", "{}") }()
		<-arrived
		if err := st.Delete(context.Background(), e.keyHash(t, "k")); err != nil {
			t.Fatal(err)
		}
		clock.Advance(lockTTL / 3)
		lines := logs.lines(t, "lease on key lost")
		close(release)
		<-first
		if len(lines) != 1 || lines[0]["msg"] != execution.LostWhileRunning || lines[0]["during"] != "renewal" {
			t.Fatalf("lost-lease lines while the upstream runs = %v, want one %q", lines, execution.LostWhileRunning)
		}
		if got := len(logs.lines(t, "lease on key lost")); got != 1 {
			t.Errorf("%d lost-lease lines after completion, want the one of the renewal", got)
		}
	})
	t.Run("complete", func(t *testing.T) {
		var logs lockedBuffer
		st := newFlaky(t)
		e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
			st.lostAfterBegin.Store(true)
			w.Write([]byte("mine"))
		}, withStore(st), withLog(&logs))
		e.do(t, "POST", "/x", "k", "{}")
		lines := logs.lines(t, "lease on key lost")
		if len(lines) != 1 || lines[0]["msg"] != execution.LostAfterDelivered || lines[0]["during"] != "complete" {
			t.Fatalf("lost-lease lines = %v, want one %q", lines, execution.LostAfterDelivered)
		}
	})
}
