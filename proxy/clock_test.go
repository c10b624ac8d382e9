package proxy

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution"
)

// fakeClock is a clock that moves only when a test advances it. Timers
// due by then fire in the advancing goroutine, in order, before Advance
// returns, so a test knows a lease renewal has run.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c    *fakeClock
	at   time.Time
	f    func()
	live bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) execution.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f, live: true}
	c.timers = append(c.timers, t)
	return t
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.AfterFunc(d, func() { ch <- c.Now() })
	return ch
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.live
	t.at, t.live = t.c.now.Add(d), true
	if !was {
		t.c.timers = append(t.c.timers, t)
	}
	return was
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.live
	t.live = false
	return was
}

// Advance moves the clock by d, firing every timer that falls due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var next *fakeTimer
		for _, t := range c.timers {
			if t.live && !t.at.After(end) && (next == nil || t.at.Before(next.at)) {
				next = t
			}
		}
		if next == nil {
			c.now = end
			c.mu.Unlock()
			return
		}
		c.now, next.live = next.at, false
		kept := c.timers[:0]
		for _, t := range c.timers {
			if t.live {
				kept = append(kept, t)
			}
		}
		c.timers = kept
		c.mu.Unlock()
		next.f()
	}
}

// nextTimer is when the earliest pending timer of c is due.
func (c *fakeClock) nextTimer() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Time
	for _, t := range c.timers {
		if t.live && (next.IsZero() || t.at.Before(next)) {
			next = t.at
		}
	}
	return next, !next.IsZero()
}

// advanceToNext waits until a timer due within d of now is armed — by a
// goroutine that arms its next wait once it has done what the last one
// was for — and moves the clock to it; what names that timer in the
// failure. Timers due later (a client's upstream.timeout) are left alone.
func (c *fakeClock) advanceToNext(t *testing.T, d time.Duration, what string) {
	t.Helper()
	var due time.Time
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		next, ok := c.nextTimer()
		if !ok || next.After(c.Now().Add(d)) {
			return fmt.Errorf("%s is not armed within %s of now", what, d)
		}
		due = next
		return nil
	})
	c.Advance(due.Sub(c.Now()))
}
