// Package executiontest gives tests of what reads an execution.Clock —
// leases, deadlines, background settling — a clock that moves only when
// the test advances it, as net/http/httptest gives tests a server. No test
// then sleeps for a lease to run out, and none races a renewal: Advance
// returns once the timers it passed have run.
package executiontest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution"
)

var _ execution.Clock = (*FakeClock)(nil)

// FakeClock is an execution.Clock that moves only when a test advances
// it. Timers due by then fire in the advancing goroutine, in the order
// they fall due, before Advance returns, so a test knows a lease renewal
// has run. It is safe for concurrent use.
type FakeClock struct {
	mu  sync.Mutex
	now time.Time
	// armed holds the timers yet to fire, in the order they were armed:
	// of two due at once, the one armed first fires first.
	armed []*fakeTimer
}

type fakeTimer struct {
	c     *FakeClock
	at    time.Time
	f     func()
	armed bool // it is in c.armed
}

// NewFakeClock returns a clock at a fixed instant, so that times a test
// logs or compares are the same from one run to the next.
func NewFakeClock() *FakeClock { return &FakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc arms a timer that calls f, in the goroutine that advances the
// clock, once d has passed.
func (c *FakeClock) AfterFunc(d time.Duration, f func()) execution.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	c.arm(t)
	return t
}

func (c *FakeClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.AfterFunc(d, func() { ch <- c.Now() })
	return ch
}

// Reset makes t due d from now, armed again if it had fired or stopped.
func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.armed
	t.at = t.c.now.Add(d)
	if !was {
		t.c.arm(t)
	}
	return was
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.armed
	if was {
		t.c.disarm(t)
	}
	return was
}

// Advance moves the clock by d, firing every timer that falls due, a
// timer armed by one that fires included. The clock never goes back: of
// two goroutines advancing it at once, the one that meant to go less far
// leaves it where the other took it.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for c.fireNext(end) {
	}
}

// fireNext moves the clock to the earliest timer due by end and runs it,
// without c.mu, which the timer's function may take; with none due, it
// moves the clock to end and reports false. Another goroutine may have
// moved the clock past end, or past the timer, while this one ran a timer
// or before it took c.mu: then the clock stays where it is.
func (c *FakeClock) fireNext(end time.Time) bool {
	c.mu.Lock()
	next := c.earliest()
	if next == nil || next.at.After(end) {
		c.forward(end)
		c.mu.Unlock()
		return false
	}
	c.forward(next.at)
	c.disarm(next)
	c.mu.Unlock()
	next.f()
	return true
}

// NextTimer is when the earliest armed timer of c is due; false if none is
// armed.
func (c *FakeClock) NextTimer() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if next := c.earliest(); next != nil {
		return next.at, true
	}
	return time.Time{}, false
}

// AdvanceToNext waits until a timer due within d of now is armed — by a
// goroutine that arms its next wait once it has done what the last one
// was for — and moves the clock to it; what names that timer in the
// failure. Timers due later (a client's upstream.timeout) are left alone.
func (c *FakeClock) AdvanceToNext(t testing.TB, d time.Duration, what string) {
	t.Helper()
	var due time.Time
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		next, ok := c.NextTimer()
		if !ok || next.After(c.Now().Add(d)) {
			return fmt.Errorf("%s is not armed within %s of now", what, d)
		}
		due = next
		return nil
	})
	c.Advance(due.Sub(c.Now()))
}

// earliest is the armed timer due first, the first armed of those due at
// once; nil if none is armed. c.mu is held.
func (c *FakeClock) earliest() *fakeTimer {
	var next *fakeTimer
	for _, t := range c.armed {
		if next == nil || t.at.Before(next.at) {
			next = t
		}
	}
	return next
}

// forward moves the clock to t if t is later than now. c.mu is held.
func (c *FakeClock) forward(t time.Time) {
	if t.After(c.now) {
		c.now = t
	}
}

// arm and disarm keep c.armed the timers yet to fire. c.mu is held.
func (c *FakeClock) arm(t *fakeTimer) {
	t.armed = true
	c.armed = append(c.armed, t)
}

func (c *FakeClock) disarm(t *fakeTimer) {
	t.armed = false
	c.armed = slices.DeleteFunc(c.armed, func(x *fakeTimer) bool { return x == t })
}
