package proxy

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// A wait for an in-flight key runs on the handler's clock: a fake clock
// ends it at wait_timeout, however little real time has passed.
func TestWaitRunsOnTheHandlersClock(t *testing.T) {
	clk := newFakeClock()
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
