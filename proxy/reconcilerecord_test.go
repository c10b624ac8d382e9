package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution/executiontest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// refusingRecords is a store that takes the lease of key, and renewals
// of it, but refuses its record, as a constraint or a trigger does: the
// same write is refused every time. With markers set it refuses the
// key's marker too, once its outcome is unknown, until accept is set.
// With timeouts set it times the record out instead, as a store does
// whose write of a large body never finishes in time; with releases set,
// the key's release.
type refusingRecords struct {
	*memory.Store
	key                                 string
	markers, accept, timeouts, releases atomic.Bool
}

// Release times the key's release out while releases is set.
func (s *refusingRecords) Release(ctx context.Context, key, token string) error {
	if s.releases.Load() && key == s.key {
		return fmt.Errorf("the release timed out: %w", store.ErrUnavailable)
	}
	return s.Store.Release(ctx, key, token)
}

func (s *refusingRecords) Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	// The marker written before the request is sent is taken: the one
	// that says the outcome is being settled is refused.
	refused := key == s.key || s.markers.Load() && key == s.key+ReconcileSuffix && len(rec.Header[markerPending]) == 0
	if refused && !s.accept.Load() {
		if s.timeouts.Load() && key == s.key {
			return fmt.Errorf("the write timed out: %w", store.ErrUnavailable)
		}
		return fmt.Errorf("a trigger refused it: %w", store.ErrRefused)
	}
	return s.Store.Complete(ctx, key, token, rec, ttl)
}

// refusingEnv is a reconciling route whose upstream commits each charge
// and hangs up, and whose lookup finds it, on a store that refuses the
// key's record, all on a fake clock; the first request is on its way.
func refusingEnv(t *testing.T, lockTTL time.Duration, refuseMarkers bool, opts ...func(*Options)) (*env, *executiontest.FakeClock, *refusingRecords, *chargeLedger, <-chan *response) {
	t.Helper()
	l := &chargeLedger{charges: map[string]bool{}}
	lookupDown := false
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			if lookupDown {
				http.Error(w, "lookup down", http.StatusServiceUnavailable)
				return
			}
			l.lookup(w, r) // found
			return
		}
		l.commit(r.Header.Get("Idempotency-Key"))
		hangUp(w)
	}
	clock := executiontest.NewFakeClock()
	mem := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { mem.Close() })
	st := &refusingRecords{Store: mem}
	st.markers.Store(refuseMarkers)
	e := newEnv(t, handler, func(o *Options) {
		// The caller waits out every settlement here, each over within a
		// minute, and its wait is no step of one for settleUntil.
		o.UpstreamTimeout = 5 * time.Minute
		reviewPolicy(&o.Default)
		o.Default.LockTTL = lockTTL
		o.Default.Reconcile.After, o.Default.Reconcile.Every = time.Millisecond, 50*time.Millisecond
		for _, opt := range opts {
			opt(o)
		}
		lookupDown = o.Default.Reconcile.Then == ThenRelease
	}, withStore(st))
	e.handler.clock = clock
	kh := e.keyHash(t, "k1")
	st.key = kh

	first := sendUntilCleanup(t, e, "/x", "k1")
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if _, _, ok := e.handler.Settling(kh); !ok {
			return errors.New("the unknown outcome is not being settled yet")
		}
		return nil
	})
	return e, clock, st, l, first
}

// settleUntil moves the clock from one step of the settlement to the
// next, each due within a minute, until none is left to settle or the
// clock reaches end.
func settleUntil(t *testing.T, e *env, clock *executiontest.FakeClock, end time.Time) {
	t.Helper()
	for clock.Now().Before(end) {
		var due time.Time
		wait.SucceedsSoon(t, 10*time.Second, func() error {
			next, ok := clock.NextTimer()
			if ok && !next.After(clock.Now().Add(time.Minute)) {
				due = next
				return nil
			}
			if e.handler.settling.Load() == 0 {
				return nil
			}
			return errors.New("a key is left to settle, and its next step is not armed within a minute")
		})
		if due.IsZero() {
			return // settled
		}
		clock.Advance(due.Sub(clock.Now()))
	}
}

// A settled answer the store refuses to record is not held for: the
// settlement gives up, its caller hears the key is being settled, and the
// key unlocks when its lease ends, its marker left for the next owner to
// ask again. Renewing the lease for a record the store always refuses
// would keep the key answering 409 for ever.
func TestSettledAnswerTheStoreRefusesDoesNotLockTheKeyForEver(t *testing.T) {
	const lockTTL = 3 * time.Second
	e, clock, st, l, first := refusingEnv(t, lockTTL, false)
	began := clock.Now()
	end := began.Add(100 * lockTTL)
	settleUntil(t, e, clock, end)
	if n := e.handler.settling.Load(); n != 0 {
		t.Fatalf("%d keys still settling %v after the lookup began, their record refused every time", n, clock.Now().Sub(began))
	}
	if held := clock.Now().Sub(began); held >= lockTTL {
		t.Errorf("settling gave up %v after the lookup began, want at once: a refused record is refused again", held)
	}
	if r := <-first; r == nil {
		t.Error("caller got no answer, want the 502 saying the key is being settled")
	} else if r.StatusCode != http.StatusBadGateway || !strings.Contains(r.body, "being settled") {
		t.Errorf("caller: %d %q, want the 502 saying the key is being settled", r.StatusCode, r.body)
	}
	leftToTheNextOwner(t, clock, st, l, lockTTL)
}

// A settled answer the store refuses is held for while the key's marker
// cannot be written either: without the marker, the key's next owner
// would forward it again. It is recorded once the store takes it.
func TestSettledAnswerTheStoreRefusesIsHeldWhileTheKeyHasNoMarker(t *testing.T) {
	const lockTTL = 3 * time.Second
	e, clock, st, l, first := refusingEnv(t, lockTTL, true)
	settleUntil(t, e, clock, clock.Now().Add(10*lockTTL))
	if n := e.handler.settling.Load(); n != 1 {
		t.Fatalf("%d keys settling 10 lock_ttls on, want the key still held", n)
	}
	if r := e.do(t, "POST", "/x", "k1", `{}`); r.StatusCode != http.StatusConflict {
		t.Errorf("retry: %d %q, want 409: the key held", r.StatusCode, r.body)
	}
	st.accept.Store(true)
	settleUntil(t, e, clock, clock.Now().Add(lockTTL))
	if r := <-first; r == nil || r.StatusCode != http.StatusOK || r.Header.Get(IdempotencyReconciled) != "true" {
		t.Errorf("caller: %v, want the found answer once the store took it", r)
	}
	if _, effects := l.counts(); effects != 1 {
		t.Errorf("effects %d, want 1", effects)
	}
}

// A settled answer the store never takes — its write times out every
// time while the lease's renewals go through — is held for one lock_ttl,
// as any record is (settleKey), then let go as a refused one is: the key
// unlocks when its lease ends, its marker left for the next owner.
func TestSettledAnswerTheStoreNeverTakesIsHeldForOneLockTTL(t *testing.T) {
	const lockTTL = 3 * time.Second
	e, clock, st, l, first := refusingEnv(t, lockTTL, false)
	st.timeouts.Store(true)

	began := clock.Now()
	settleUntil(t, e, clock, began.Add(100*lockTTL))
	if n := e.handler.settling.Load(); n != 0 {
		t.Fatalf("%d keys still settling %v after the lookup began, their record timed out every time", n, clock.Now().Sub(began))
	}
	if held := clock.Now().Sub(began); held < lockTTL {
		t.Errorf("settling gave up %v after the lookup began, want at least lock_ttl (%v) of tries", held, lockTTL)
	}
	if r := <-first; r == nil || r.StatusCode != http.StatusBadGateway || !strings.Contains(r.body, "being settled") {
		t.Errorf("caller: %v, want the 502 saying the key is being settled", r)
	}
	leftToTheNextOwner(t, clock, st, l, lockTTL)
}

// Under then: release, a key whose release the store never takes — it
// times out every time while the renewals go through — is tried for one
// lock_ttl, then left to its lease, which releases it as well: it does
// not stay locked for ever.
func TestReleaseTheStoreNeverTakesIsTriedForOneLockTTL(t *testing.T) {
	const lockTTL = 3 * time.Second
	e, clock, st, _, first := refusingEnv(t, lockTTL, false, func(o *Options) {
		o.Default.Reconcile.Then = ThenRelease
		o.Default.Reconcile.For = 200 * time.Millisecond
	})
	st.releases.Store(true)
	mem, kh := st.Store, st.key

	began := clock.Now()
	settleUntil(t, e, clock, began.Add(100*lockTTL))
	if n := e.handler.settling.Load(); n != 0 {
		t.Fatalf("%d keys still settling %v after the lookup began, their release timed out every time", n, clock.Now().Sub(began))
	}
	if held := clock.Now().Sub(began); held < lockTTL {
		t.Errorf("settling gave up %v after the lookup began, want at least lock_ttl (%v) of tries", held, lockTTL)
	}
	if r := <-first; r == nil || r.StatusCode != http.StatusBadGateway {
		t.Errorf("caller: %v, want the 502 saying the key is released", r)
	}
	clock.Advance(lockTTL)
	if _, err := mem.Inspect(context.Background(), kh); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the key's lease a lock_ttl after settling gave up: Inspect = %v, want it expired", err)
	}
}

// leftToTheNextOwner checks a key whose settlement gave up: a lock_ttl
// later its lease has run out, its marker is kept for the next owner to
// ask the upstream again, and the upstream ran it once.
func leftToTheNextOwner(t *testing.T, clock *executiontest.FakeClock, st *refusingRecords, l *chargeLedger, lockTTL time.Duration) {
	t.Helper()
	clock.Advance(lockTTL)
	if _, err := st.Store.Inspect(context.Background(), st.key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the key's lease a lock_ttl after settling gave up: Inspect = %v, want it expired", err)
	}
	if _, err := st.Store.Inspect(context.Background(), st.key+ReconcileSuffix); err != nil {
		t.Errorf("the key's marker: %v, want it kept for the next owner", err)
	}
	if _, effects := l.counts(); effects != 1 {
		t.Errorf("effects %d, want 1", effects)
	}
}

// sendUntilCleanup sends a keyed JSON POST to path in the background and
// returns where its answer comes (closed without one if the request left
// first): at the test's cleanup the request leaves, since on a failure it
// may still be waiting on a stopped clock.
func sendUntilCleanup(t *testing.T, e *env, path, key string) <-chan *response {
	t.Helper()
	ctx, leave := context.WithCancel(context.Background())
	first := make(chan *response, 1)
	go func() {
		defer close(first)
		res, err := e.srv.Client().Do(e.request(t, ctx, path, key))
		if err != nil {
			return // it left
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		first <- &response{Response: res, body: string(b)}
	}()
	t.Cleanup(func() {
		leave()
		<-first
	})
	return first
}
