package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution/executiontest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// outageStore is a store on a fake clock whose Extend and Complete fail as
// an unreachable store does until the clock reaches back (extendBack for
// Extend), counting every try.
type outageStore struct {
	Store
	clock            *executiontest.FakeClock
	back, extendBack atomic.Pointer[time.Time]
	completes        atomic.Int64
	// refuse makes Complete fail as a store that refuses the write does.
	refuse atomic.Bool
	// unreplicated makes Complete write the record and then fail as a
	// store whose replicas never acknowledge it does: the record is on the
	// master, and every later try finds it written and still unacknowledged.
	unreplicated atomic.Bool
	written      atomic.Bool
	// blackholeExtend, once the clock reaches it, makes each Extend take
	// blackholeTimeout on the clock, as a store that does not answer holds
	// a call until its timeout, and fail.
	blackholeExtend atomic.Pointer[time.Time]
	// holdFirstExtend, when set, holds the first Extend: it sends on the
	// channel when it arrives, and goes on once the test sends back.
	holdFirstExtend atomic.Pointer[chan struct{}]
}

func (s *outageStore) down(at *atomic.Pointer[time.Time]) bool {
	back := at.Load()
	return back != nil && s.clock.Now().Before(*back)
}

// blackholeTimeout is how long an Extend to a blackholed outageStore takes.
const blackholeTimeout = 300 * time.Millisecond

func (s *outageStore) Extend(ctx context.Context, key, token string, ttl time.Duration) error {
	if from := s.blackholeExtend.Load(); from != nil && !s.clock.Now().Before(*from) {
		s.clock.Advance(blackholeTimeout)
		return store.ErrUnavailable
	}
	down := s.down(&s.extendBack) // when it arrives
	if hold := s.holdFirstExtend.Swap(nil); hold != nil {
		*hold <- struct{}{} // it has arrived
		<-*hold             // the test lets it go
	}
	if down {
		return store.ErrUnavailable
	}
	return s.Store.Extend(ctx, key, token, ttl)
}

func (s *outageStore) Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	s.completes.Add(1)
	if s.refuse.Load() {
		return fmt.Errorf("a trigger refused it: %w", store.ErrRefused)
	}
	if s.down(&s.back) {
		return store.ErrUnavailable
	}
	if s.unreplicated.Load() {
		if !s.written.Load() {
			if err := s.Store.Complete(ctx, key, token, rec, ttl); err != nil {
				return err
			}
			s.written.Store(true)
		}
		return fmt.Errorf("no replica acknowledged it: %w", store.ErrUnreplicated)
	}
	return s.Store.Complete(ctx, key, token, rec, ttl)
}

// outageEnv is a handler with a lock_ttl of lockTTL on a memory store, both
// on a fake clock, behind an outageStore.
func outageEnv(t *testing.T, lockTTL time.Duration, opts ...envOption) (*env, *executiontest.FakeClock, *outageStore) {
	t.Helper()
	clock := executiontest.NewFakeClock()
	mem := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { mem.Close() })
	st := &outageStore{Store: mem, clock: clock}
	e := newEnv(t, nil, append([]envOption{withStore(st), withPolicy(func(p *Policy) { p.LockTTL = lockTTL })}, opts...)...)
	e.handler.clock = clock
	return e, clock, st
}

// settleInBackground moves the clock from one try at settling to the next,
// each as soon as it is armed, until no key is left to settle or the
// clock reaches end.
func settleInBackground(t *testing.T, e *env, clock *executiontest.FakeClock, end time.Time) {
	t.Helper()
	for clock.Now().Before(end) {
		var due time.Time
		wait.SucceedsSoon(t, 10*time.Second, func() error {
			var ok bool
			if due, ok = clock.NextTimer(); ok || e.handler.settling.Load() == 0 {
				return nil
			}
			return errors.New("a key is left to settle, and no try at it is armed")
		})
		if e.handler.settling.Load() == 0 {
			return
		}
		clock.Advance(due.Sub(clock.Now()))
	}
}

// settlesAndReplays moves the clock from one try at settling to the next
// until no key is left to settle, by end at the latest, then retries the
// key advance later, past the lease: the retry must replay the one
// execution (its body, when body is not "").
func settlesAndReplays(t *testing.T, e *env, clock *executiontest.FakeClock, st *outageStore, end time.Time, advance time.Duration, body string) {
	t.Helper()
	settleInBackground(t, e, clock, end)
	if n := e.handler.settling.Load(); n != 0 {
		t.Fatalf("%d keys still settling at %s", n, end.Format(time.StampMilli))
	}
	clock.Advance(advance)
	r := e.do(t, "POST", "/x", "k", "{}")
	if !r.replayed() || (body != "" && r.body != body) || e.up.calls.Load() != 1 {
		t.Fatalf("retry after the lease: %d replayed=%v executions=%d after %d tries to record, want the replay of the one execution",
			r.StatusCode, r.replayed(), e.up.calls.Load(), st.completes.Load())
	}
}

// A store that comes back in the last second of a lease still gets the
// record: the background retries use the whole lease, their last try just
// before it expires, and the retry after the lease is a replay.
func TestRecordingUsesTheWholeLease(t *testing.T) {
	const lockTTL = 3 * time.Second
	e, clock, st := outageEnv(t, lockTTL)
	began := clock.Now()
	// Back 2.7 s into the lease: after the retry that 50 ms doubling
	// (capped at 1 s) brings 2.55 s in, before the lease ends.
	back := began.Add(2700 * time.Millisecond)
	st.back.Store(&back)
	st.extendBack.Store(&back)
	first := e.do(t, "POST", "/x", "k", "{}")
	if first.StatusCode != http.StatusCreated {
		t.Fatalf("first: %d, want the response delivered at once", first.StatusCode)
	}
	settlesAndReplays(t, e, clock, st, began.Add(2*lockTTL), lockTTL, first.body) // past the lease the record was written in
}

// A store that answers renewals but not yet the record keeps the key
// locked: the lease is renewed while the record is retried, past lock_ttl,
// so a retry never executes the key again; once the record is taken the
// retry replays it.
func TestLeaseRenewedWhileTheRecordIsRetried(t *testing.T) {
	const lockTTL = 3 * time.Second
	e, clock, st := outageEnv(t, lockTTL)
	began := clock.Now()
	// Back after the lease's first end, within the lock_ttl it is renewed
	// for (5.4 s in, after the tries 3.55 and 4.55 s in).
	back := began.Add(lockTTL + 4*lockTTL/5)
	st.back.Store(&back)
	first := e.do(t, "POST", "/x", "k", "{}")
	if first.StatusCode != http.StatusCreated {
		t.Fatalf("first: %d, want the response delivered at once", first.StatusCode)
	}
	settleInBackground(t, e, clock, began.Add(lockTTL+lockTTL/3))
	if r := e.do(t, "POST", "/x", "k", "{}"); r.StatusCode != http.StatusConflict {
		t.Fatalf("retry past the lease's first end, the record not taken yet: %d, want 409", r.StatusCode)
	}
	settleInBackground(t, e, clock, began.Add(5*lockTTL))
	r := e.do(t, "POST", "/x", "k", "{}")
	if !r.replayed() || r.body != first.body || e.up.calls.Load() != 1 {
		t.Fatalf("retry once the record was taken: %d replayed=%v executions=%d, want the replay of the one execution",
			r.StatusCode, r.replayed(), e.up.calls.Load())
	}
	if got := testutil.ToFloat64(e.handler.metrics.lockLost); got != 0 {
		t.Errorf("lock lost = %v, want 0", got)
	}
}

// A renewal the store answers just after the upstream call ended still
// lengthens the lease the record is retried in: the store's lease runs
// from that renewal, and a store back after the lease's first end, before
// its renewed one, still gets the record.
func TestRenewalAnsweredAfterTheCallEndedLengthensTheRetries(t *testing.T) {
	const lockTTL = 3 * time.Second
	clock := executiontest.NewFakeClock()
	mem := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { mem.Close() })
	st := &outageStore{Store: mem, clock: clock}
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once // only the first call waits
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() {
			close(arrived)
			<-release
		})
		w.Write([]byte("done"))
	}, withStore(st), withPolicy(func(p *Policy) { p.LockTTL = lockTTL }))
	e.handler.clock = clock
	began := clock.Now()
	first := make(chan *response, 1)
	go func() { first <- e.do(t, "POST", "/x", "k", "{}") }()
	<-arrived

	hold := make(chan struct{})
	st.holdFirstExtend.Store(&hold)
	advanced := make(chan struct{})
	go func() { clock.Advance(lockTTL / 3); close(advanced) }() // the first renewal
	<-hold                                                      // it is on its way to the store
	// The store is unreachable from the moment the call ends until after
	// the lease's first end, but before the renewed one.
	back := began.Add(lockTTL + lockTTL/6)
	st.back.Store(&back)
	st.extendBack.Store(&back)
	close(release)
	if r := <-first; r.StatusCode != http.StatusOK {
		t.Fatalf("first: %d, want the response delivered", r.StatusCode)
	}
	hold <- struct{}{} // the renewal, answered now that the call ended
	<-advanced

	settlesAndReplays(t, e, clock, st, began.Add(2*lockTTL), lockTTL, "")
}

// A store that takes renewals but never the record (a trigger refusing the
// body's update under a generic error, a body whose write always times
// out) keeps the key locked one lock_ttl past its lease at most: then
// settling gives up with its log line, the key unlocks, and the failed
// tries are logged once, not once a second.
func TestRecordNeverTakenIsGivenUpOneLockTTLPastItsLease(t *testing.T) {
	const lockTTL = 3 * time.Second
	var logs lockedBuffer
	e, clock, st := outageEnv(t, lockTTL, withLog(&logs))
	began := clock.Now()
	never := began.Add(1000 * time.Hour)
	st.back.Store(&never)
	e.do(t, "POST", "/x", "k", "{}")
	settleInBackground(t, e, clock, began.Add(200*lockTTL))
	if n := e.handler.settling.Load(); n != 0 {
		t.Fatalf("%d keys still settling 200 lock_ttls later, after %d tries to record", n, st.completes.Load())
	}
	if ended := clock.Now(); ended.After(began.Add(2 * lockTTL)) {
		t.Errorf("settling gave up %v after the lease began, want within 2 lock_ttls (%v)", ended.Sub(began), 2*lockTTL)
	}
	if got := len(logs.lines(t, "could not record response before its lease expired")); got != 1 {
		t.Errorf("%d give-up lines, want 1", got)
	}
	if got := len(logs.lines(t, "could not record response yet")); got != 1 {
		t.Errorf("%d retry warnings for one key, want 1", got)
	}
	clock.Advance(lockTTL) // past the lease's last renewal
	if r := e.do(t, "POST", "/x", "k", "{}"); r.StatusCode == http.StatusConflict {
		t.Errorf("retry after settling gave up: 409, want the key unlocked")
	}
}

// A record the store's master took but too few replicas acknowledged
// before its lease ran out is given up as a record on the master, which
// retries replay, not as a record lost.
func TestRecordNoReplicaAcknowledgedIsGivenUpAsOnTheMaster(t *testing.T) {
	const lockTTL = 3 * time.Second
	var logs lockedBuffer
	e, clock, st := outageEnv(t, lockTTL, withLog(&logs))
	began := clock.Now()
	st.unreplicated.Store(true)
	e.do(t, "POST", "/x", "k", "{}")
	settleInBackground(t, e, clock, began.Add(200*lockTTL))
	if n := e.handler.settling.Load(); n != 0 {
		t.Fatalf("%d keys still settling 200 lock_ttls later, after %d tries to record", n, st.completes.Load())
	}
	if got := len(logs.lines(t, "response recorded on the store's master, but fewer replicas than replica_ack acknowledged it before its lease expired")); got != 1 {
		t.Errorf("%d give-up lines saying the record is on the master, want 1", got)
	}
	if got := len(logs.lines(t, "could not record response before its lease expired")); got != 0 {
		t.Errorf("%d give-up lines saying the record was not written, want 0", got)
	}
	if r := e.do(t, "POST", "/x", "k", "{}"); !r.replayed() {
		t.Errorf("retry: %d %s, want the record on the master replayed", r.StatusCode, r.body)
	}
}

// A record the store refused (store.ErrRefused: a constraint, a trigger,
// a privilege) is not renewed for: the same write is refused again, so the
// key unlocks when its lease ends, not a lock_ttl later.
func TestRecordTheStoreRefusesIsNotRenewedFor(t *testing.T) {
	const lockTTL = 3 * time.Second
	e, clock, st := outageEnv(t, lockTTL)
	began := clock.Now()
	st.refuse.Store(true)
	e.do(t, "POST", "/x", "k", "{}")
	settleInBackground(t, e, clock, began.Add(200*lockTTL))
	if n := e.handler.settling.Load(); n != 0 {
		t.Fatalf("%d keys still settling 200 lock_ttls later", n)
	}
	if ended := clock.Now(); ended.After(began.Add(lockTTL)) {
		t.Errorf("settling gave up %v after the lease began, want within its lock_ttl (%v)", ended.Sub(began), lockTTL)
	}
	clock.Advance(lockTTL)
	if r := e.do(t, "POST", "/x", "k", "{}"); r.StatusCode == http.StatusConflict {
		t.Errorf("retry after the lease: 409, want the key unlocked")
	}
}

// The try due just before the lease ends goes out before that pass's
// renewal: a renewal to a store that does not answer takes the store's
// timeout, and a record sent after it would reach the store after the
// lease ended. A store that takes records again in the lease's last
// 120 ms, while renewals go unanswered, still gets the record.
func TestLastTryBeforeTheLeaseEndsGoesBeforeItsRenewal(t *testing.T) {
	const lockTTL = 3 * time.Second
	e, clock, st := outageEnv(t, lockTTL)
	began := clock.Now()
	st.blackholeExtend.Store(&began)
	// After the try 2.55 s in, which its renewal's timeout delays to
	// 2.85 s; before the last one, 2.9 s in.
	back := began.Add(2880 * time.Millisecond)
	st.back.Store(&back)
	first := e.do(t, "POST", "/x", "k", "{}")
	settlesAndReplays(t, e, clock, st, began.Add(2*lockTTL), lockTTL, first.body)
}

// The last try goes before its pass's renewal also when the backoff lands
// exactly on it: with a lock_ttl of 1.65 s the tries come 50, 150, 350 and
// 750 ms in, and the next step of 800 ms reaches the last try, 100 ms
// before the lease ends, to the nanosecond. A store that does not answer
// renewals, and takes records again before then, still gets the record.
func TestLastTryOnABackoffStepGoesBeforeItsRenewal(t *testing.T) {
	const lockTTL = 1650 * time.Millisecond
	e, clock, st := outageEnv(t, lockTTL)
	began := clock.Now()
	st.blackholeExtend.Store(&began)
	back := began.Add(1500 * time.Millisecond) // after the try 750 ms in
	st.back.Store(&back)
	first := e.do(t, "POST", "/x", "k", "{}")
	settlesAndReplays(t, e, clock, st, began.Add(2*lockTTL), lockTTL, first.body)
}

// A try at settling renews the lease once a third of lock_ttl or less is
// left of it, exactly a third too: with a lock_ttl of 1.125 s the try
// 750 ms in renews it, and that renewal keeps the key for the store that
// stops answering renewals just after and takes records again 1.8 s in,
// past the lease's first end.
func TestRecordRetryRenewsTheLeaseWithExactlyAThirdLeft(t *testing.T) {
	const lockTTL = 1125 * time.Millisecond
	e, clock, st := outageEnv(t, lockTTL)
	began := clock.Now()
	noRenewals := began.Add(time.Second)
	st.blackholeExtend.Store(&noRenewals)
	back := began.Add(1800 * time.Millisecond)
	st.back.Store(&back)
	first := e.do(t, "POST", "/x", "k", "{}")
	settlesAndReplays(t, e, clock, st, began.Add(3*lockTTL), 2*lockTTL, first.body)
}

// Under a lock_ttl below a second the last try goes out a tenth of it
// before the lease ends, not 100 ms: with a lock_ttl of 500 ms, 450 ms
// in. A store that answers no renewal and takes records again 420 ms in
// still gets the record.
func TestLastTryOfAShortLeaseIsATenthOfLockTTLBeforeItsEnd(t *testing.T) {
	const lockTTL = 500 * time.Millisecond
	e, clock, st := outageEnv(t, lockTTL)
	began := clock.Now()
	never := began.Add(time.Hour)
	st.extendBack.Store(&never)
	back := began.Add(420 * time.Millisecond)
	st.back.Store(&back)
	first := e.do(t, "POST", "/x", "k", "{}")
	settlesAndReplays(t, e, clock, st, began.Add(2*lockTTL), lockTTL, first.body)
}
