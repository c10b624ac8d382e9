package execution_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution"
	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution/executiontest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// The alarm's lock_ttl and the renewal rule are one fact: a lease of
// MinLockTTL(d), renewed every RenewEvery of it, has at least d left when
// an outage begins, and a lease a millisecond shorter has not.
func TestMinLockTTLIsWhatTheRenewalsLeave(t *testing.T) {
	for _, d := range []time.Duration{time.Second, 2 * time.Second, 10 * time.Second, 90 * time.Second} {
		ttl := execution.MinLockTTL(d)
		if left := ttl - execution.RenewEvery(ttl); left < d {
			t.Errorf("MinLockTTL(%v) = %v leaves %v after a renewal's interval, less than %v", d, ttl, left, d)
		}
		shorter := ttl - time.Millisecond
		if left := shorter - execution.RenewEvery(shorter); left >= d {
			t.Errorf("lock_ttl %v, below MinLockTTL(%v) = %v, leaves %v: MinLockTTL is not the shortest", shorter, d, ttl, left)
		}
	}
}

// holder is a lease's holder whose store answers each renewal with the
// next of answers (nil once they run out), or, when asked is set, tells
// asked it was called and answers with what the test sends on answer.
type holder struct {
	mu      sync.Mutex
	answers []error
	extends int
	lost    int
	failed  []error
	firsts  []time.Duration

	asked  chan struct{}
	answer chan error
}

func (h *holder) Extend(ctx context.Context, ttl time.Duration) error {
	if h.asked != nil {
		h.asked <- struct{}{}
		return <-h.answer
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.extends++
	if len(h.answers) == 0 {
		return nil
	}
	err := h.answers[0]
	h.answers = h.answers[1:]
	return err
}

func (h *holder) FirstRenewal(first time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.firsts = append(h.firsts, first)
}

func (h *holder) Lost() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lost++
}

func (h *holder) RenewFailed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failed = append(h.failed, err)
}

func (h *holder) count() (extends, lost, failed int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.extends, h.lost, len(h.failed)
}

const (
	leaseTTL   = 30 * time.Second
	leaseEvery = 10 * time.Second // RenewEvery(leaseTTL)
)

// startLease starts a lease of leaseTTL now, renewed first after first.
func startLease(t *testing.T, c *executiontest.FakeClock, h *holder, first time.Duration, thenDeadline bool) *execution.Lease {
	t.Helper()
	if got := execution.RenewEvery(leaseTTL); got != leaseEvery {
		t.Fatalf("RenewEvery(%v) = %v, want %v", leaseTTL, got, leaseEvery)
	}
	l := &execution.Lease{}
	l.Start(c.Now(), leaseTTL)
	l.Renew(context.Background(), c, h, leaseTTL, first, thenDeadline)
	return l
}

// A renewal the store accepts makes the lease run for lock_ttl from when
// it was sent, and the next is due RenewEvery later; only the first arms
// the call's deadline.
func TestALeaseRenewedRunsFromTheRenewalAndRenewsAgainEveryThirdOfItsTTL(t *testing.T) {
	c, h := executiontest.NewFakeClock(), &holder{}
	began := c.Now()
	l := startLease(t, c, h, leaseEvery/2, true)
	// A second Renew, as a retried start would make, arms nothing more.
	l.Renew(context.Background(), c, h, leaseTTL, leaseEvery/2, true)

	c.Advance(leaseEvery/2 - time.Nanosecond)
	if extends, _, _ := h.count(); extends != 0 {
		t.Fatalf("%d renewals before the first was due, want 0", extends)
	}
	c.Advance(time.Nanosecond)
	if extends, _, _ := h.count(); extends != 1 {
		t.Fatalf("%d renewals when the first was due, want 1", extends)
	}
	if got, want := l.End(), began.Add(leaseEvery/2+leaseTTL); !got.Equal(want) {
		t.Errorf("after the first renewal the lease ends %v after it began, want %v", got.Sub(began), want.Sub(began))
	}

	c.Advance(leaseEvery - time.Nanosecond)
	if extends, _, _ := h.count(); extends != 1 {
		t.Fatalf("%d renewals before RenewEvery passed since the first, want 1", extends)
	}
	c.Advance(time.Nanosecond)
	if extends, _, _ := h.count(); extends != 2 {
		t.Fatalf("%d renewals once RenewEvery passed since the first, want 2", extends)
	}
	if got, want := l.End(), began.Add(leaseEvery/2+leaseEvery+leaseTTL); !got.Equal(want) {
		t.Errorf("after the second renewal the lease ends %v after it began, want %v", got.Sub(began), want.Sub(began))
	}
	h.mu.Lock()
	firsts := slices.Clone(h.firsts)
	h.mu.Unlock()
	if want := []time.Duration{leaseEvery / 2}; !slices.Equal(firsts, want) {
		t.Errorf("the renewals armed the deadline with %v, want once with %v", firsts, want)
	}
	if lost := l.Stop(); lost {
		t.Error("Stop reported a lease the store renewed as lost")
	}
}

// A renewal the store fails (not a lost lease) is reported and tried again
// after a quarter of RenewEvery, leaving the lease's end as it was; a
// retry the store accepts renews the lease from when it was sent.
func TestALeaseRenewalThatFailsIsRetriedSooner(t *testing.T) {
	down := errors.New("store unreachable")
	c, h := executiontest.NewFakeClock(), &holder{answers: []error{down}}
	began := c.Now()
	l := startLease(t, c, h, leaseEvery, false)

	c.Advance(leaseEvery)
	if extends, _, failed := h.count(); extends != 1 || failed != 1 {
		t.Fatalf("%d renewals, %d reported failed, want 1 and 1", extends, failed)
	}
	h.mu.Lock()
	reported := h.failed[0]
	h.mu.Unlock()
	if !errors.Is(reported, down) {
		t.Errorf("the failure reported is %v, want %v", reported, down)
	}
	if got, want := l.End(), began.Add(leaseTTL); !got.Equal(want) {
		t.Errorf("after a failed renewal the lease ends %v after it began, want %v", got.Sub(began), want.Sub(began))
	}

	c.Advance(leaseEvery/4 - time.Nanosecond)
	if extends, _, _ := h.count(); extends != 1 {
		t.Fatalf("%d renewals before a quarter of RenewEvery passed since the failure, want 1", extends)
	}
	c.Advance(time.Nanosecond)
	if extends, lost, failed := h.count(); extends != 2 || lost != 0 || failed != 1 {
		t.Fatalf("%d renewals, %d lost, %d failed once a quarter of RenewEvery passed since the failure, want 2, 0 and 1", extends, lost, failed)
	}
	if got, want := l.End(), began.Add(leaseEvery+leaseEvery/4+leaseTTL); !got.Equal(want) {
		t.Errorf("after the retry the lease ends %v after it began, want %v", got.Sub(began), want.Sub(began))
	}
	if lost := l.Stop(); lost {
		t.Error("Stop reported a lease the store failed to renew, then renewed, as lost")
	}
}

// A renewal that finds the lease lost reports it, stops renewing, and Stop
// says so.
func TestALeaseRenewalThatFindsItLostStopsRenewing(t *testing.T) {
	c, h := executiontest.NewFakeClock(), &holder{answers: []error{fmt.Errorf("extend: %w", store.ErrLockLost)}}
	began := c.Now()
	l := startLease(t, c, h, leaseEvery, false)

	c.Advance(leaseEvery)
	if extends, lost, failed := h.count(); extends != 1 || lost != 1 || failed != 0 {
		t.Fatalf("%d renewals, %d lost, %d failed, want 1, 1 and 0", extends, lost, failed)
	}
	c.Advance(10 * leaseTTL)
	if extends, _, _ := h.count(); extends != 1 {
		t.Errorf("%d renewals of a lease found lost, want no more than the one that found it", extends)
	}
	if got, want := l.End(), began.Add(leaseTTL); !got.Equal(want) {
		t.Errorf("the lost lease ends %v after it began, want %v", got.Sub(began), want.Sub(began))
	}
	if lost := l.Stop(); !lost {
		t.Error("Stop did not report the lease a renewal found lost")
	}
}

// Stop ends the renewals: none runs after it, whether or not one was ever
// due.
func TestAStoppedLeaseIsNotRenewed(t *testing.T) {
	c, h := executiontest.NewFakeClock(), &holder{}
	l := startLease(t, c, h, leaseEvery, false)
	c.Advance(leaseEvery)
	if lost := l.Stop(); lost {
		t.Error("Stop reported a lease the store renewed as lost")
	}
	c.Advance(10 * leaseTTL)
	if extends, _, _ := h.count(); extends != 1 {
		t.Errorf("%d renewals, want the 1 before Stop", extends)
	}

	// Stopped before it was renewed, a lease arms no renewal.
	h = &holder{}
	l = &execution.Lease{}
	l.Start(c.Now(), leaseTTL)
	l.Stop()
	l.Renew(context.Background(), c, h, leaseTTL, leaseEvery, false)
	c.Advance(10 * leaseTTL)
	if extends, _, _ := h.count(); extends != 0 {
		t.Errorf("%d renewals of a lease stopped before it was renewed, want 0", extends)
	}
}

// A renewal answered after Stop lengthens the lease only when the store
// accepted it and it ends later than the lease is known to: the settling
// that renewed it since may have made it end later still.
func TestALeaseRenewalAnsweredAfterStopLengthensOnlyWhatItRenewed(t *testing.T) {
	for _, tc := range []struct {
		name     string
		answer   error
		settled  time.Duration // ExtendTo, after began, before the answer; 0 for none
		wantEnds time.Duration // after began
	}{
		{name: "accepted", answer: nil, wantEnds: leaseEvery + leaseTTL},
		{name: "failed", answer: errors.New("store unreachable"), wantEnds: leaseTTL},
		{name: "lost", answer: store.ErrLockLost, wantEnds: leaseTTL},
		{name: "accepted, settled later", answer: nil, settled: leaseEvery + leaseTTL + time.Second, wantEnds: leaseEvery + leaseTTL + time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := executiontest.NewFakeClock()
			h := &holder{asked: make(chan struct{}), answer: make(chan error)}
			began := c.Now()
			l := startLease(t, c, h, leaseEvery, false)
			advanced := make(chan struct{})
			go func() {
				defer close(advanced)
				c.Advance(leaseEvery)
			}()
			select {
			case <-h.asked: // the renewal is on its way
			case <-advanced:
				t.Fatal("no renewal was sent when the first was due")
			}
			if lost := l.Stop(); lost {
				t.Error("Stop reported a lease no renewal found lost")
			}
			if tc.settled != 0 {
				l.ExtendTo(began.Add(tc.settled))
			}
			h.answer <- tc.answer
			<-advanced // the renewal is answered
			if got, want := l.End(), began.Add(tc.wantEnds); !got.Equal(want) {
				t.Errorf("the lease ends %v after it began, want %v", got.Sub(began), want.Sub(began))
			}
			if _, lost, failed := h.count(); lost != 0 || failed != 0 {
				t.Errorf("a renewal answered after Stop reported %d lost and %d failed, want none: the settling reports its own", lost, failed)
			}
		})
	}
}
