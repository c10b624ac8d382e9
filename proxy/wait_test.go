package proxy

import (
	"context"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution"
	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution/executiontest"
)

// A wait for an in-flight key runs on the handler's clock: a fake clock
// ends it at wait_timeout, however little real time has passed.
func TestWaitRunsOnTheHandlersClock(t *testing.T) {
	clk := executiontest.NewFakeClock()
	start := clk.Now()
	const timeout = time.Hour
	ended := make(chan time.Time, 1)
	go func() {
		var w waiter
		for w.wait(context.Background(), clk, nil, timeout) {
		}
		ended <- clk.Now()
	}()
	for range 100_000 {
		select {
		case at := <-ended:
			if got := at.Sub(start); got < timeout {
				t.Fatalf("the wait ended after %s of the fake clock, before wait_timeout %s", got, timeout)
			}
			return
		default:
			clk.Advance(maxPoll)
			runtime.Gosched()
		}
	}
	t.Fatal("the wait did not end when the fake clock passed wait_timeout")
}

// steppingClock moves by each wait asked of it, at once: AfterFunc records
// d, advances the clock by d and calls f before it returns.
type steppingClock struct {
	now   time.Time
	steps []time.Duration
}

func (c *steppingClock) Now() time.Time { return c.now }

func (c *steppingClock) AfterFunc(d time.Duration, f func()) execution.Timer {
	c.steps = append(c.steps, d)
	c.now = c.now.Add(d)
	f()
	return firedTimer{}
}

// firedTimer is a timer that has fired.
type firedTimer struct{}

func (firedTimer) Reset(time.Duration) bool { return false }
func (firedTimer) Stop() bool               { return false }

func (c *steppingClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.AfterFunc(d, func() { ch <- c.now })
	return ch
}

// A wait for an in-flight key polls quickly at first, then backs off to
// maxPoll, and its last poll ends exactly at wait_timeout, when it stops.
func TestWaitPollsQuicklyThenBacksOffUntilItsTimeout(t *testing.T) {
	clk := &steppingClock{now: time.Unix(1_700_000_000, 0)}
	var w waiter
	for polls := 0; w.wait(context.Background(), clk, nil, time.Second); polls++ {
		if polls == 100 {
			t.Fatalf("still waiting after %d polls: %v", polls, clk.steps)
		}
	}
	ms := time.Millisecond
	want := []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 200 * ms, 200 * ms, 200 * ms, 85 * ms}
	if !reflect.DeepEqual(clk.steps, want) {
		t.Errorf("polls %v, want %v", clk.steps, want)
	}
}
