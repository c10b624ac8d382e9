package executiontest_test

import (
	"slices"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution/executiontest"
)

// Advance runs the timers it passes in the order they fall due, each with
// the clock at its due time, and one armed by a firing timer too when it
// falls due by the end.
func TestAdvanceFiresDueTimersInOrderAtTheirTimes(t *testing.T) {
	c := executiontest.NewFakeClock()
	start := c.Now()
	var fired []time.Duration
	note := func() { fired = append(fired, c.Now().Sub(start)) }
	c.AfterFunc(3*time.Second, note)
	c.AfterFunc(time.Second, func() {
		note()
		c.AfterFunc(time.Second, note) // due at 2s
	})
	c.AfterFunc(10*time.Second, note)

	c.Advance(5 * time.Second)
	if want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}; !slices.Equal(fired, want) {
		t.Errorf("fired at %v, want %v", fired, want)
	}
	if got, want := c.Now().Sub(start), 5*time.Second; got != want {
		t.Errorf("the clock stands %v after its start, want %v", got, want)
	}
	if next, ok := c.NextTimer(); !ok || !next.Equal(start.Add(10*time.Second)) {
		t.Errorf("NextTimer = %v, %t, want the one due at 10s", next.Sub(start), ok)
	}
}

// A stopped timer never fires; Reset arms a fired or stopped timer again,
// from the time it is reset, and each reports whether the timer was armed.
func TestStopAndResetArmAndDisarm(t *testing.T) {
	c := executiontest.NewFakeClock()
	fired := 0
	timer := c.AfterFunc(time.Second, func() { fired++ })

	if !timer.Stop() {
		t.Error("Stop of an armed timer reported it was not armed")
	}
	if timer.Stop() {
		t.Error("Stop of a stopped timer reported it was armed")
	}
	c.Advance(time.Minute)
	if fired != 0 {
		t.Fatalf("a stopped timer fired %d times", fired)
	}
	if _, ok := c.NextTimer(); ok {
		t.Error("NextTimer found a stopped timer")
	}

	if timer.Reset(time.Second) {
		t.Error("Reset of a stopped timer reported it was armed")
	}
	c.Advance(time.Second)
	if timer.Reset(time.Second) {
		t.Error("Reset of a fired timer reported it was armed")
	}
	if !timer.Reset(2 * time.Second) {
		t.Error("Reset of an armed timer reported it was not armed")
	}
	c.Advance(2*time.Second - time.Nanosecond)
	if fired != 1 {
		t.Fatalf("fired %d times before the last Reset's time, want 1", fired)
	}
	c.Advance(time.Nanosecond)
	if fired != 2 {
		t.Errorf("fired %d times, want 2: once per Reset that was not reset again", fired)
	}
}

// After sends the time it falls due once the clock is advanced to it.
func TestAfterSendsWhenAdvancedToIt(t *testing.T) {
	c := executiontest.NewFakeClock()
	due := c.Now().Add(time.Second)
	ch := c.After(time.Second)
	select {
	case <-ch:
		t.Fatal("After sent before the clock moved")
	default:
	}
	c.Advance(time.Hour)
	if got := <-ch; !got.Equal(due) {
		t.Errorf("After sent %v, want %v", got, due)
	}
}

// AdvanceToNext waits for a timer another goroutine arms, and moves the
// clock to it, not past it.
func TestAdvanceToNextWaitsForTheTimerAndStopsAtIt(t *testing.T) {
	c := executiontest.NewFakeClock()
	start := c.Now()
	fired := make(chan time.Time, 1)
	go c.AfterFunc(time.Second, func() { fired <- c.Now() })

	c.AdvanceToNext(t, time.Minute, "the timer")
	if got, want := (<-fired).Sub(start), time.Second; got != want {
		t.Errorf("the timer fired %v after the start, want %v", got, want)
	}
	if got, want := c.Now().Sub(start), time.Second; got != want {
		t.Errorf("the clock stands %v after its start, want %v", got, want)
	}
}

// Two goroutines advancing the clock at once never move it back: the one
// that meant to go less far, and finishes last, leaves the clock where the
// other took it, and a timer it fires meanwhile reads no earlier time than
// one already read.
func TestConcurrentAdvancesNeverMoveTheClockBack(t *testing.T) {
	c := executiontest.NewFakeClock()
	start := c.Now()
	// first holds the far advance at 2s, second holds the short one at
	// 4s, so the far advance goes on to its end while the short one is
	// still under way.
	firstIn, firstOut := make(chan struct{}), make(chan struct{})
	secondIn, secondOut := make(chan struct{}), make(chan struct{})
	var inSecond time.Time
	c.AfterFunc(2*time.Second, func() { close(firstIn); <-firstOut })
	c.AfterFunc(4*time.Second, func() { close(secondIn); <-secondOut; inSecond = c.Now() })
	c.AfterFunc(8*time.Second, func() {})

	far, short := make(chan struct{}), make(chan struct{})
	go func() { defer close(far); c.Advance(10 * time.Second) }() // to 10s
	<-firstIn
	go func() { defer close(short); c.Advance(3 * time.Second) }() // from 2s to 5s
	<-secondIn
	close(firstOut)
	<-far
	if got, want := c.Now().Sub(start), 10*time.Second; got != want {
		t.Fatalf("after the far advance the clock stands %v after its start, want %v", got, want)
	}
	close(secondOut)
	<-short

	if got, want := inSecond.Sub(start), 10*time.Second; got < want {
		t.Errorf("a timer the short advance fired read %v after the start, after the clock had reached %v", got, want)
	}
	if got, want := c.Now().Sub(start), 10*time.Second; got != want {
		t.Errorf("after both advances the clock stands %v after its start, want %v", got, want)
	}
}

// A timer armed for a time already past, as time.AfterFunc takes a
// negative duration, fires on the next advance with the clock where it
// stands, not moved back to the timer's time.
func TestATimerDueInThePastFiresWithoutMovingTheClockBack(t *testing.T) {
	c := executiontest.NewFakeClock()
	start := c.Now()
	var at time.Time
	c.AfterFunc(-time.Second, func() { at = c.Now() })

	c.Advance(0)
	if at.IsZero() {
		t.Fatal("a timer due in the past did not fire when the clock was advanced")
	}
	if !at.Equal(start) {
		t.Errorf("the timer read %v after the start, want the clock's time", at.Sub(start))
	}
	if !c.Now().Equal(start) {
		t.Errorf("the clock stands %v after its start, want where it was", c.Now().Sub(start))
	}
}
