package execution_test

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution"
	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution/executiontest"
)

// bounded is what a call's deadline acts on, noting what it was asked:
// the lease renewals it started and the cuts it noted. renewing, when
// set, runs as a renewal is started, in the deadline's goroutine.
type bounded struct {
	mu       sync.Mutex
	renewals []renewal
	cuts     []execution.Cut
	renewing func()
}

type renewal struct {
	first        time.Duration
	thenDeadline bool
}

func (b *bounded) RenewLease(first time.Duration, thenDeadline bool) {
	b.mu.Lock()
	b.renewals = append(b.renewals, renewal{first, thenDeadline})
	f := b.renewing
	b.mu.Unlock()
	if f != nil {
		f()
	}
}

func (b *bounded) DeadlinePassed(cut execution.Cut) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cuts = append(b.cuts, cut)
}

func (b *bounded) asked() ([]renewal, []execution.Cut) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.renewals), slices.Clone(b.cuts)
}

// startCall starts a call on clock with the client's wait, max_execution
// and lock_ttl given; cancels counts its cancellations.
func startCall(clock *executiontest.FakeClock, wait, maxExecution, lockTTL time.Duration) (c *execution.Call, b *bounded, cancels *atomic.Int32) {
	cancels = new(atomic.Int32)
	c = &execution.Call{Wait: wait, MaxExecution: maxExecution, LockTTL: lockTTL, Cancel: func(error) { cancels.Add(1) }}
	b = new(bounded)
	c.Start(clock, b)
	return c, b, cancels
}

// await is what the client's wait for c sees next, the client still
// there; it fails the test when nothing comes.
func await(t *testing.T, c *execution.Call) execution.Event {
	t.Helper()
	got := make(chan execution.Event, 1)
	go func() { got <- c.Await(nil) }()
	select {
	case e := <-got:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("the client's wait saw nothing: a wake-up was lost")
		return 0
	}
}

// The deadline passes at the client's wait, which lets the client go and
// leaves the call running, then at max_execution, which cancels it: the
// second timer is due max_execution after the start, not after the wait.
func TestCallDeadlinePassesAtTheWaitThenAtMaxExecution(t *testing.T) {
	const wait, maxExecution = time.Second, 5 * time.Second
	clock := executiontest.NewFakeClock()
	start := clock.Now()
	c, b, cancels := startCall(clock, wait, maxExecution, time.Minute)

	if due, ok := clock.NextTimer(); !ok || !due.Equal(start.Add(wait)) {
		t.Fatalf("first timer due at %v (armed %v), want the wait, %v", due.Sub(start), ok, wait)
	}
	clock.Advance(wait - time.Millisecond)
	if c.Woken() {
		t.Fatal("the client was woken before its wait passed")
	}
	clock.Advance(time.Millisecond)
	if got := await(t, c); got != execution.WaitPassed {
		t.Fatalf("at the wait the client saw %v, want WaitPassed", got)
	}
	if n := cancels.Load(); n != 0 {
		t.Fatalf("the call was cancelled %d times when its client's wait passed, want it left running", n)
	}
	if due, ok := clock.NextTimer(); !ok || !due.Equal(start.Add(maxExecution)) {
		t.Fatalf("deadline re-armed for %v after the start (armed %v), want max_execution, %v", due.Sub(start), ok, maxExecution)
	}
	clock.Advance(maxExecution - wait - time.Millisecond)
	if n := cancels.Load(); n != 0 {
		t.Fatalf("cancelled %d times before max_execution", n)
	}
	clock.Advance(time.Millisecond)
	if _, cuts := b.asked(); !slices.Equal(cuts, []execution.Cut{execution.CutAtMaxExecution}) || cancels.Load() != 1 {
		t.Fatalf("at max_execution: cuts %v, %d cancellations; want [CutAtMaxExecution], 1", cuts, cancels.Load())
	}
	if c.Woken() {
		t.Error("the client was woken again at max_execution: only the wait's end and the call's wake it")
	}
}

// A call that may run no longer than its client waits is cancelled at the
// wait, as upstream.timeout, and the client is not let go: it waits for
// the call's end, which says the call was cut.
func TestCallWithNoTimeBeyondTheWaitIsCutAtTheWait(t *testing.T) {
	for _, maxExecution := range []time.Duration{time.Second, 500 * time.Millisecond} {
		clock := executiontest.NewFakeClock()
		c, b, cancels := startCall(clock, time.Second, maxExecution, time.Minute)
		clock.Advance(time.Second)
		if _, cuts := b.asked(); !slices.Equal(cuts, []execution.Cut{execution.CutAtWait}) || cancels.Load() != 1 {
			t.Errorf("max_execution %v, wait 1s: cuts %v, %d cancellations; want [CutAtWait], 1", maxExecution, cuts, cancels.Load())
		}
		if c.Woken() {
			t.Errorf("max_execution %v, wait 1s: the client was let go at the wait, its call cancelled", maxExecution)
		}
		if _, ok := clock.NextTimer(); ok {
			t.Errorf("max_execution %v, wait 1s: a timer is still armed after the call was cut", maxExecution)
		}
	}
}

// The deadline is stopped for good when the call returns: it does not
// fire after, a deadline that fires as the call returns does not re-arm
// itself for max_execution, and a first renewal that fires after does not
// arm it. Each would wake a client whose call is over, start renewals of
// a lease being settled, or note a cut that never happened.
func TestCallDeadlineNeverFiresAfterTheCallReturned(t *testing.T) {
	t.Run("returned before the wait", func(t *testing.T) {
		clock := executiontest.NewFakeClock()
		c, b, cancels := startCall(clock, time.Second, 5*time.Second, time.Minute)
		clock.Advance(time.Second / 2)
		c.Returned()
		clock.Advance(time.Minute)
		if renewals, cuts := b.asked(); len(renewals) != 0 || len(cuts) != 0 || cancels.Load() != 1 {
			t.Errorf("after the call returned: renewals %v, cuts %v, %d cancellations; want none, none, 1 (the return's)", renewals, cuts, cancels.Load())
		}
		if c.Woken() {
			t.Error("the client was woken by a deadline after its call returned")
		}
	})
	t.Run("returned as the wait passed", func(t *testing.T) {
		clock := executiontest.NewFakeClock()
		c, b, cancels := startCall(clock, time.Second, 5*time.Second, time.Minute)
		// The renewals the deadline starts begin before it re-arms: the
		// call returns then.
		b.renewing = c.Returned
		clock.Advance(time.Second)
		if _, ok := clock.NextTimer(); ok {
			t.Fatal("the deadline was re-armed for max_execution after the call returned")
		}
		clock.Advance(time.Minute)
		if _, cuts := b.asked(); len(cuts) != 0 || cancels.Load() != 1 {
			t.Errorf("after the call returned: cuts %v, %d cancellations; want none, 1 (the return's)", cuts, cancels.Load())
		}
	})
	t.Run("returned before the first renewal", func(t *testing.T) {
		clock := executiontest.NewFakeClock()
		c, b, cancels := startCall(clock, 30*time.Second, time.Minute, 3*time.Second)
		c.Returned()
		c.ArmAfterRenewal(time.Second) // the renewal's timer fired as the call returned
		if _, ok := clock.NextTimer(); ok {
			t.Fatal("the first renewal armed the deadline after the call returned")
		}
		clock.Advance(time.Minute)
		if _, cuts := b.asked(); len(cuts) != 0 || cancels.Load() != 1 {
			t.Errorf("after the call returned: cuts %v, %d cancellations; want none, 1 (the return's)", cuts, cancels.Load())
		}
	})
}

// The client's wait holds one signal, and never loses what it says: the
// wait's end and the call's end signalled with nobody waiting leave the
// client a signal that tells the call ended; the call's end after the
// client saw its wait pass wakes it again.
func TestCallWakeUpIsNeverLost(t *testing.T) {
	t.Run("both before the client looks", func(t *testing.T) {
		clock := executiontest.NewFakeClock()
		c, _, _ := startCall(clock, time.Second, time.Minute, time.Minute)
		clock.Advance(time.Second)
		c.Returned()
		c.End()
		if got := await(t, c); got != execution.CallEnded {
			t.Fatalf("the client saw %v, want CallEnded", got)
		}
	})
	t.Run("the end after the wait was seen", func(t *testing.T) {
		clock := executiontest.NewFakeClock()
		c, _, _ := startCall(clock, time.Second, time.Minute, time.Minute)
		clock.Advance(time.Second)
		if got := await(t, c); got != execution.WaitPassed {
			t.Fatalf("at the wait the client saw %v, want WaitPassed", got)
		}
		c.Returned()
		c.End()
		if got := await(t, c); got != execution.CallEnded {
			t.Fatalf("after the call ended the client saw %v, want CallEnded", got)
		}
	})
	t.Run("the client leaves", func(t *testing.T) {
		clock := executiontest.NewFakeClock()
		c, _, _ := startCall(clock, time.Second, time.Minute, time.Minute)
		gone := make(chan struct{})
		close(gone)
		if got := c.Await(gone); got != execution.ClientLeft {
			t.Fatalf("a client gone, nothing signalled: the wait saw %v, want ClientLeft", got)
		}
	})
}

// The lease's renewals start with the deadline's first timer: when the
// first renewal, every third of lock_ttl, is due by the wait, it is armed
// first and arms the deadline when it fires, still due at the wait; when
// due after the wait, the deadline starts the renewals at the wait, the
// first still a third of lock_ttl after the start. Either way the
// renewals are started once.
func TestCallStartsTheLeaseRenewalsAtItsFirstTimer(t *testing.T) {
	const wait = 3 * time.Second
	tests := []struct {
		name    string
		lockTTL time.Duration
		// atStart are the renewals started with the call, atWait those
		// started when the wait passes.
		atStart, atWait []renewal
	}{
		{"first renewal before the wait", 6 * time.Second, []renewal{{2 * time.Second, true}}, nil},
		{"first renewal at the wait", 9 * time.Second, []renewal{{3 * time.Second, true}}, nil},
		{"first renewal after the wait", 30 * time.Second, nil, []renewal{{7 * time.Second, false}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := executiontest.NewFakeClock()
			start := clock.Now()
			c, b, _ := startCall(clock, wait, time.Minute, tc.lockTTL)
			if got, _ := b.asked(); !slices.Equal(got, tc.atStart) {
				t.Fatalf("renewals started with the call: %v, want %v", got, tc.atStart)
			}
			if len(tc.atStart) > 0 {
				// The first renewal fires: it arms the deadline.
				if _, ok := clock.NextTimer(); ok {
					t.Fatal("the deadline is armed with the call although the first renewal comes first")
				}
				first := tc.atStart[0].first
				clock.Advance(first)
				c.ArmAfterRenewal(first)
			}
			if due, ok := clock.NextTimer(); !ok || !due.Equal(start.Add(wait)) {
				t.Fatalf("deadline due %v after the start (armed %v), want the wait, %v", due.Sub(start), ok, wait)
			}
			clock.Advance(start.Add(wait).Sub(clock.Now()))
			if got, _ := b.asked(); !slices.Equal(got, append(tc.atStart, tc.atWait...)) {
				t.Errorf("renewals started by the wait's end: %v, want %v", got, append(tc.atStart, tc.atWait...))
			}
		})
	}
}
