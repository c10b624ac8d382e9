package proxy

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// Two owners of one key in this process (the first lost its lease and the
// key was taken again): removing either leaves the other reachable, and
// Abort cancels both.
func TestOwnersSameKeyTwice(t *testing.T) {
	for _, firstOut := range []bool{true, false} {
		var o owners
		o.init()
		ctx1, cancel1 := context.WithCancel(context.Background())
		ctx2, cancel2 := context.WithCancel(context.Background())
		a := o.add("k", cancel1)
		b := o.add("k", cancel2)
		if got := o.done("k"); got != b {
			t.Fatal("done does not follow the newest owner")
		}
		if firstOut {
			o.remove("k", a)
			if got := o.done("k"); got != b {
				t.Fatal("removing the first owner lost the second")
			}
		} else {
			o.remove("k", b)
			if got := o.done("k"); got != a {
				t.Fatal("removing the second owner lost the first")
			}
		}
		o.cancelAll()
		if firstOut && ctx2.Err() == nil || !firstOut && ctx1.Err() == nil {
			t.Fatal("Abort missed an owner")
		}
		cancel1()
		cancel2()
	}
	var o owners
	o.init()
	ctx1, cancel1 := context.WithCancel(context.Background())
	ctx2, cancel2 := context.WithCancel(context.Background())
	o.add("k", cancel1)
	o.add("k", cancel2)
	o.cancelAll()
	if ctx1.Err() == nil || ctx2.Err() == nil {
		t.Fatal("Abort missed an owner of a key owned twice")
	}
}

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
