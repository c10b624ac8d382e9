package execution

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// call stands for an upstream call.
type call struct{}

// goroutineID is the calling goroutine's number, from its stack's first
// line ("goroutine 42 [running]:").
func goroutineID() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	return strings.Fields(string(b))[1]
}

func idleCallers(c *Callers[*call], want int32) func() error {
	return func() error {
		if got := c.idle.Load(); got != want {
			return fmt.Errorf("%d idle callers, want %d", got, want)
		}
		return nil
	}
}

func TestCallersRunTheNextCallOnTheGoroutineOfTheLast(t *testing.T) {
	ids := make(chan string, 1)
	// One idle caller at most: a call that finds none idle gets a goroutine
	// that exits after it, while the first stays.
	c := NewCallers(func(*call) { ids <- goroutineID() }, 1, time.Minute)
	c.Start(&call{})
	last := <-ids
	// The caller counts itself idle just before it waits: a call may miss
	// it in between, but not once it waits. One that missed it ran on a
	// new goroutine, and of the two the first to count itself idle stays:
	// the new one, as often as not. The next call must run on the
	// goroutine of the call before it, whichever that was.
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		c.Start(&call{})
		id := <-ids
		if id != last {
			err := fmt.Errorf("the call ran on goroutine %s, want %s, which ran the last", id, last)
			last = id
			return err
		}
		return nil
	})
	// A caller handed a call is no longer idle: once it is done, it waits
	// again, the one idle caller there is, and it keeps taking calls.
	for range 3 {
		wait.SucceedsSoon(t, 10*time.Second, idleCallers(c, 1))
		c.Start(&call{})
		<-ids
	}
	wait.SucceedsSoon(t, 10*time.Second, idleCallers(c, 1))
}

func TestCallersNeverMakeACallWaitAndKeepAtMostMaxIdle(t *testing.T) {
	const calls, maxIdle = 8, 2
	base := runtime.NumGoroutine()
	var running sync.WaitGroup
	running.Add(calls)
	release := make(chan struct{})
	c := NewCallers(func(*call) {
		running.Done()
		<-release
	}, maxIdle, time.Minute)
	for range calls {
		c.Start(&call{}) // with every caller busy, a new one
	}
	running.Wait() // all at once: none waited for another to finish
	close(release)
	wait.SucceedsSoon(t, 10*time.Second, idleCallers(c, maxIdle))
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if n := runtime.NumGoroutine(); n > base+maxIdle {
			return fmt.Errorf("%d goroutines, want at most %d: only %d callers stay idle", n, base+maxIdle, maxIdle)
		}
		return nil
	})
}

func TestIdleCallersExitAfterTheirTimeout(t *testing.T) {
	ids := make(chan string, 1)
	c := NewCallers(func(*call) { ids <- goroutineID() }, 4, 500*time.Millisecond)
	c.Start(&call{})
	first := <-ids
	wait.SucceedsSoon(t, 10*time.Second, idleCallers(c, 1))
	wait.SucceedsSoon(t, 10*time.Second, idleCallers(c, 0)) // its timeout passed
	c.Start(&call{})
	if second := <-ids; second == first {
		t.Errorf("the call after the timeout ran on goroutine %s, which should have exited", first)
	}
}
