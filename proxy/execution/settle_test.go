package execution_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution"
	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution/executiontest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// recorder is a store that answers each operation from the test's
// functions (nil: it takes it), and notes what it was asked, when.
type recorder struct {
	clock    execution.Clock
	complete func(rec *store.Record) error
	release  func() error
	extend   func() error

	mu       sync.Mutex
	ops      []string        // "complete" and "extend", in the order sent
	recorded []*store.Record // records taken
	tries    []time.Time     // when each Complete or Release was sent
	starts   []time.Time     // the start each Complete was timed from
	extends  []time.Duration
	renewed  []time.Time // when each Extend was sent
}

func (r *recorder) CompleteFrom(_ context.Context, start time.Time, _, _ string, rec *store.Record, _ time.Duration) error {
	r.mu.Lock()
	r.starts = append(r.starts, start)
	r.mu.Unlock()
	return r.Complete(context.Background(), "", "", rec, 0)
}

func (r *recorder) Complete(_ context.Context, _, _ string, rec *store.Record, _ time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, "complete")
	r.tries = append(r.tries, r.clock.Now())
	if r.complete != nil {
		if err := r.complete(rec); err != nil {
			return err
		}
	}
	r.recorded = append(r.recorded, rec)
	return nil
}

func (r *recorder) Release(context.Context, string, string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tries = append(r.tries, r.clock.Now())
	if r.release != nil {
		return r.release()
	}
	return nil
}

func (r *recorder) Extend(_ context.Context, _, _ string, ttl time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, "extend")
	r.extends = append(r.extends, ttl)
	r.renewed = append(r.renewed, r.clock.Now())
	if r.extend != nil {
		return r.extend()
	}
	return nil
}

// settling is a key's settling on r, its lease of ttl begun now, and its
// settler, whose log is written to the returned buffer.
func settling(t *testing.T, r *recorder, ttl time.Duration, rec *store.Record) (*execution.Settling, *execution.Settler, *bytes.Buffer) {
	t.Helper()
	clock := r.clock
	lease := new(execution.Lease)
	lease.Start(clock.Now(), ttl)
	var log bytes.Buffer
	e := &execution.Settler{
		Store: r, Clock: &clock, Log: slog.New(slog.NewTextHandler(&log, nil)),
		LockLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "lost"}),
		BodyOmitted: map[string]prometheus.Counter{
			execution.OmittedStoreFull: prometheus.NewCounter(prometheus.CounterOpts{Name: "omitted"}),
		},
	}
	s := &execution.Settling{Key: "k", Token: "t", Route: "r", LockTTL: ttl, Lease: lease, Rec: rec, TTL: time.Hour}
	return s, e, &log
}

func answer(body string) *store.Record {
	return &store.Record{Status: 201, Header: map[string][]string{"Content-Length": {"2"}, "X-Id": {"7"}}, Body: []byte(body)}
}

// A store with no room for a record whole takes it without its body: the
// status and headers still answer every retry, the key is settled.
func TestSettlingStoresARecordWithoutItsBodyWhenTheStoreHasNoRoomForIt(t *testing.T) {
	clock := executiontest.NewFakeClock()
	r := &recorder{clock: clock, complete: func(rec *store.Record) error {
		if len(rec.Body) > 0 {
			return store.ErrFull
		}
		return nil
	}}
	s, e, _ := settling(t, r, 3*time.Second, answer("ok"))
	if !s.Try(context.Background(), e, false) {
		t.Fatal("a record the store takes without its body left the key unsettled")
	}
	got := r.recorded[0]
	if !got.BodyOmitted || got.Body != nil || got.Status != 201 || got.Header["X-Id"][0] != "7" || got.Header["Content-Length"][0] != "0" {
		t.Errorf("recorded %+v, want the answer's status and headers, no body, Content-Length 0", got)
	}
	if n := testutil.ToFloat64(e.BodyOmitted[execution.OmittedStoreFull]); n != 1 || s.OmitReason != execution.OmittedStoreFull {
		t.Errorf("records omitted for a full store = %v (reason %q), want 1", n, s.OmitReason)
	}
	if s.Held {
		t.Error("a key whose record the store took is held")
	}
}

// A record without a body the store has no room for is held at once: there
// is nothing to leave out.
func TestSettlingHoldsARecordWithoutABodyTheStoreHasNoRoomFor(t *testing.T) {
	clock := executiontest.NewFakeClock()
	r := &recorder{clock: clock, complete: func(*store.Record) error { return store.ErrFull }}
	s, e, _ := settling(t, r, 3*time.Second, &store.Record{Status: 204})
	if s.Try(context.Background(), e, false) || !s.Held {
		t.Fatalf("a record the store has no room for: held %v, want held", s.Held)
	}
	if n := testutil.ToFloat64(e.BodyOmitted[execution.OmittedStoreFull]); n != 0 || s.Rec.BodyOmitted || len(r.tries) != 1 {
		t.Errorf("a record with no body was tried %d times, said without its body %v (counted %v): want one try, nothing omitted", len(r.tries), s.Rec.BodyOmitted, n)
	}
}

// A record the store has no room for even without its body holds its key:
// its lease is renewed, so no retry executes it again, until the record
// fits; then it is stored.
func TestSettlingHoldsAKeyWhoseRecordTheStoreHasNoRoomFor(t *testing.T) {
	clock := executiontest.NewFakeClock()
	var mu sync.Mutex
	full := true
	r := &recorder{clock: clock, complete: func(*store.Record) error {
		mu.Lock()
		defer mu.Unlock()
		if full {
			return store.ErrFull
		}
		return nil
	}}
	ttl := 3 * time.Second
	s, e, log := settling(t, r, ttl, answer("ok"))
	if s.Try(context.Background(), e, false) || !s.Held {
		t.Fatalf("settled %v, held %v with the store full: want held", !s.Held, s.Held)
	}
	done := make(chan struct{})
	go func() { s.Later(context.Background(), e, false); close(done) }()
	// Well past its lease's first end, with the store still full: the key
	// is still held, its lease renewed for lock_ttl each time.
	for firstEnd := s.Lease.End(); !clock.Now().After(firstEnd.Add(ttl)); {
		clock.AdvanceToNext(t, ttl, "the next try while the store is full")
	}
	got := extends(r)
	if len(got) == 0 {
		t.Fatal("a held key's lease was never renewed")
	}
	for _, d := range got {
		if d != ttl {
			t.Fatalf("a held key's lease was renewed for %v, want lock_ttl %v", d, ttl)
		}
	}
	mu.Lock()
	full = false
	mu.Unlock()
	runUntil(t, clock, done)
	if last := r.recorded[len(r.recorded)-1]; !last.BodyOmitted {
		t.Errorf("recorded %+v, want it without its body", last)
	}
	if !strings.Contains(log.String(), "store had room again") {
		t.Errorf("log %q does not say the held record was stored", log)
	}
}

// runUntil moves clock to each wait Settling.Later arms until it returns
// (done).
func runUntil(t *testing.T, clock *executiontest.FakeClock, done <-chan struct{}) {
	t.Helper()
	for range 10_000 {
		armed := false
		wait.SucceedsSoon(t, 10*time.Second, func() error {
			select {
			case <-done:
				return nil
			default:
			}
			if _, ok := clock.NextTimer(); ok {
				armed = true
				return nil
			}
			return errors.New("settling neither returned nor armed its next wait")
		})
		if !armed {
			return
		}
		next, _ := clock.NextTimer()
		clock.Advance(next.Sub(clock.Now()))
	}
	t.Fatal("settling armed 10,000 waits without returning")
}

func extends(r *recorder) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.extends...)
}

// A store that stays unavailable gets its last try just before the lease
// ends, as this process reads it — never at its end or after, when a retry
// may have found the key free — within the lease's last tenth, at most its
// last 100ms.
func TestSettlingTriesForTheLastTimeBeforeTheLeaseEnds(t *testing.T) {
	for _, ttl := range []time.Duration{500 * time.Millisecond, 3 * time.Second} {
		clock := executiontest.NewFakeClock()
		down := errors.New("store down")
		r := &recorder{clock: clock, release: func() error { return down }}
		s, e, log := settling(t, r, ttl, nil)
		end := s.Lease.End()
		if s.Try(context.Background(), e, false) {
			t.Fatal("a release the store failed settled the key")
		}
		done := make(chan struct{})
		go func() { s.Later(context.Background(), e, false); close(done) }()
		runUntil(t, clock, done)
		last := r.tries[len(r.tries)-1]
		if !last.Before(end) || end.Sub(last) > min(ttl/10, 100*time.Millisecond) {
			t.Errorf("lock_ttl %v: last try %v before the lease's end, want within min(lock_ttl/10, 100ms), before it", ttl, end.Sub(last))
		}
		if got := strings.Count(log.String(), "could not release key yet"); got != 1 {
			t.Errorf("%d failed tries logged, want the first only", got)
		}
		if !strings.Contains(log.String(), "it unlocks at lock_ttl") {
			t.Errorf("log %q does not say the key unlocks at lock_ttl", log)
		}
	}
}

// The try due just before the lease ends goes before that instant's
// renewal: a renewal sent to a store that does not answer would hold the
// try until the store's timeout, past the lease's end. lock_ttl 2.65s puts
// the last wait exactly at the backoff's (50ms doubling to 1s: the last
// try is due at 2.55s).
func TestSettlingSendsTheLastTryBeforeItsRenewal(t *testing.T) {
	clock := executiontest.NewFakeClock()
	timeout := errors.New("store timeout")
	r := &recorder{clock: clock, complete: func(*store.Record) error { return timeout }, extend: func() error { return timeout }}
	s, e, _ := settling(t, r, 2650*time.Millisecond, answer("ok"))
	s.Try(context.Background(), e, false)
	done := make(chan struct{})
	go func() { s.Later(context.Background(), e, false); close(done) }()
	runUntil(t, clock, done)
	lastTry := r.tries[len(r.tries)-1]
	for i, op := range r.ops {
		if op == "extend" {
			if i+1 < len(r.ops) {
				t.Errorf("a renewal went before a try (%v); the last try at %v must go before its renewal", r.ops, lastTry)
			}
			break
		}
	}
}

// A record still to be written has its lease renewed as soon as the lease
// enters its last third, as a running lease would be: a store that answers
// again, but not yet the record, must not see the lease run out. lock_ttl
// 2.325s puts a try (50ms doubling: at 1.55s) exactly where its last third,
// 775ms, begins.
func TestSettlingRenewsARecordsLeaseWhenItsLastThirdBegins(t *testing.T) {
	clock := executiontest.NewFakeClock()
	timeout := errors.New("store timeout")
	r := &recorder{clock: clock, complete: func(*store.Record) error { return timeout }}
	ttl := 2325 * time.Millisecond
	s, e, _ := settling(t, r, ttl, answer("ok"))
	lastThird := s.Lease.End().Add(-execution.RenewEvery(ttl))
	s.Try(context.Background(), e, false)
	done := make(chan struct{})
	go func() { s.Later(context.Background(), e, false); close(done) }()
	runUntil(t, clock, done)
	if len(r.renewed) == 0 || !r.renewed[0].Equal(lastThird) {
		t.Errorf("renewals sent at %v, want the first when the lease's last third began, %v", r.renewed, lastThird)
	}
	if end := lastThird.Add(execution.RenewEvery(ttl)).Add(ttl); s.Lease.End().After(end) {
		t.Errorf("the lease was renewed to %v, past one lock_ttl after its end (%v)", s.Lease.End(), end)
	}
}

// A lease found lost when the record is written is counted once, and
// settles the key: the record is another owner's to write.
func TestSettlingCountsALeaseLostOnTheRecordOnce(t *testing.T) {
	for _, foundBefore := range []bool{false, true} {
		clock := executiontest.NewFakeClock()
		r := &recorder{clock: clock, complete: func(*store.Record) error { return store.ErrLockLost }}
		s, e, _ := settling(t, r, 3*time.Second, answer("ok"))
		if !s.Try(context.Background(), e, foundBefore) || !s.RecordLost {
			t.Errorf("a record refused for a lost lease: settled %v, RecordLost %v; want both", true, s.RecordLost)
		}
		want := 1.0
		if foundBefore {
			want = 0 // counted where it was found
		}
		if n := testutil.ToFloat64(e.LockLost); n != want {
			t.Errorf("lease found lost before: %v; lost leases counted %v, want %v", foundBefore, n, want)
		}
	}
}

// The first try at a record is timed from when the call returned, which
// the caller read; every later try from when it is sent.
func TestSettlingTimesTheFirstTryFromTheCallsReturn(t *testing.T) {
	clock := executiontest.NewFakeClock()
	r := &recorder{clock: clock, complete: func(*store.Record) error { return errors.New("timeout") }}
	s, e, _ := settling(t, r, 3*time.Second, answer("ok"))
	returned := clock.Now().Add(-time.Millisecond)
	s.From = returned
	s.Try(context.Background(), e, false)
	clock.Advance(time.Second)
	s.Try(context.Background(), e, false)
	if r.starts[0] != returned || r.starts[1] != clock.Now() {
		t.Errorf("tries timed from %v, want the call's return %v, then the clock %v", r.starts, returned, clock.Now())
	}
}

// While the upstream is asked about a key's unknown outcome, its lease is
// renewed every third of lock_ttl, for lock_ttl each time, and no more.
func TestSettlingHoldsAnUnknownOutcomesLeaseWhileItWaits(t *testing.T) {
	clock := executiontest.NewFakeClock()
	r := &recorder{clock: clock}
	ttl := 3 * time.Second
	s, e, _ := settling(t, r, ttl, nil)
	start := clock.Now()
	done := make(chan struct{})
	var lost bool
	go func() { lost = s.HoldFor(context.Background(), e, 2*time.Second+500*time.Millisecond); close(done) }()
	runUntil(t, clock, done)
	want := []time.Time{start.Add(time.Second), start.Add(2 * time.Second), start.Add(2500 * time.Millisecond)}
	if lost || !slices.Equal(r.renewed, want) || !slices.Equal(r.extends, []time.Duration{ttl, ttl, ttl}) {
		t.Errorf("held 2.5s: renewed at %v for %v (lost %v), want at %v for lock_ttl each", r.renewed, r.extends, lost, want)
	}
	if end := start.Add(2500 * time.Millisecond).Add(ttl); !s.Lease.End().Equal(end) {
		t.Errorf("lease ends %v, want %v: one lock_ttl from its last renewal", s.Lease.End(), end)
	}
}

// A renewal of an unknown outcome's lease says whether the key may be sent
// upstream again (held: the store renewed it) and whether it is no longer
// this process's (lost: the store says so, or could not be reached until
// the lease's end passed).
func TestSettlingRenewsAnUnknownOutcomesLeaseOrSaysItIsLost(t *testing.T) {
	down := errors.New("store down")
	for _, tc := range []struct {
		name       string
		err        error
		after      time.Duration // the clock's move before the renewal
		held, lost bool
		counted    float64 // lost leases counted
	}{
		{"renewed", nil, time.Second, true, false, 0},
		{"lost", store.ErrLockLost, time.Second, false, true, 1},
		{"store down before the lease's end", down, 2999 * time.Millisecond, false, false, 0},
		{"store down at the lease's end", down, 3 * time.Second, false, true, 0},
	} {
		clock := executiontest.NewFakeClock()
		r := &recorder{clock: clock, extend: func() error { return tc.err }}
		s, e, _ := settling(t, r, 3*time.Second, nil)
		clock.Advance(tc.after)
		held, lost := s.RenewUnknown(context.Background(), e)
		if held != tc.held || lost != tc.lost || testutil.ToFloat64(e.LockLost) != tc.counted {
			t.Errorf("%s: held %v, lost %v, counted %v; want %v, %v, %v", tc.name, held, lost, testutil.ToFloat64(e.LockLost), tc.held, tc.lost, tc.counted)
		}
	}
}

// While an upstream call of the settlement runs, its lease is renewed
// every third of lock_ttl until the call ends (stop), and not after.
func TestSettlingKeepsAnUnknownOutcomesLeaseWhileALookupRuns(t *testing.T) {
	clock := executiontest.NewFakeClock()
	r := &recorder{clock: clock}
	ttl := 3 * time.Second
	s, e, _ := settling(t, r, ttl, nil)
	stop := s.KeepHeld(context.Background(), e)
	for range 3 {
		clock.AdvanceToNext(t, ttl, "the next renewal while a lookup runs")
	}
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if n := len(extends(r)); n != 3 {
			return fmt.Errorf("%d renewals, want 3", n)
		}
		return nil
	})
	stop()
	clock.Advance(10 * ttl)
	if n := len(extends(r)); n != 3 {
		t.Errorf("%d renewals after the lookup ended, want none past the 3 before", n-3)
	}
}
