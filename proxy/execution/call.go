package execution

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// An upstream call's deadline and its client's wait for it. The client
// waits until the call ends or its wait passes (upstream.timeout, or a
// gRPC client's shorter grpc-timeout); the call goes on past the wait,
// detached from the client, until upstream.max_execution, when it is
// cancelled. One timer is the deadline: it fires at the wait, then again
// at max_execution. The lease's first renewal, when due before the wait,
// is armed instead and arms the deadline when it fires; when due after
// the wait, the deadline starts the renewals. A call shorter than both,
// nearly every call, arms one timer, not two.

// A Call is an upstream call's deadline and its client's wait. Its caller
// sets Wait, MaxExecution, LockTTL and Cancel, Starts it with the call,
// and tells it when the call Returned and, its outcome ready, Ended; the
// client's goroutine Awaits it.
type Call struct {
	// Wait is how long the client waits for the call; MaxExecution how
	// long the call may run (upstream.max_execution). Both run from Start.
	Wait, MaxExecution time.Duration
	// LockTTL is the lock_ttl of the call's lease, renewed every
	// RenewEvery of it.
	LockTTL time.Duration
	// Cancel cancels the call's context: the deadline calls it at the end
	// with the Cut it ends the call at, the context's cause; Returned with
	// nil.
	Cancel context.CancelCauseFunc

	clock Clock
	bound Bounded

	// mu guards deadline and returned: the deadline's timer is armed by
	// the lease's first renewal and re-armed when it fires, either of
	// which may run as the call returns.
	mu       sync.Mutex
	deadline Timer
	returned bool // the deadline is stopped, for good
	// timedOut is set once the wait passed, ended once the call's outcome
	// is ready; wake is signalled after either.
	timedOut atomic.Bool
	ended    atomic.Bool
	wake     chan struct{}
}

// Bounded is what a Call's deadline acts on beyond the call's context:
// the lease it renews, and what notes why the call was cancelled.
type Bounded interface {
	// RenewLease starts the renewals of the call's lease (Lease.Renew),
	// the first due after first; with thenDeadline, that renewal arms
	// the deadline (Call.ArmAfterRenewal).
	RenewLease(first time.Duration, thenDeadline bool)
	// DeadlinePassed notes why the deadline cancels the call, just
	// before it does.
	DeadlinePassed(cut Cut)
}

// A Cut is the deadline a call was cancelled at. It is the cause of the
// call's context (context.Cause), an error that says it is a timeout, as
// a net.Error does: what reports the call's failure, such as its span,
// tells a call that ran out of time from one that failed.
type Cut uint8

const (
	// CutAtWait: the client's wait passed, and the call cannot go on
	// detached: MaxExecution is no longer than the wait, or no room is
	// left among the detached calls.
	CutAtWait Cut = iota + 1
	// CutAtMaxExecution: MaxExecution passed.
	CutAtMaxExecution
)

func (c Cut) Error() string {
	if c == CutAtWait {
		return "upstream call cut when its client stopped waiting"
	}
	return "upstream call cut at upstream.max_execution"
}

// Timeout reports that the call ran out of time.
func (Cut) Timeout() bool { return true }

// Start arms the call's first timer, reading clock: the deadline, due at
// the wait, or, when due first, the lease's first renewal, which arms it.
func (c *Call) Start(clock Clock, b Bounded) {
	c.clock, c.bound = clock, b
	c.wake = make(chan struct{}, 1)
	if every := RenewEvery(c.LockTTL); every <= c.Wait {
		b.RenewLease(every, true)
		return
	}
	c.arm(c.Wait) // it starts the renewals
}

// ArmAfterRenewal arms the deadline, due when the wait ends, from the
// lease's first renewal, which fired first after Start.
func (c *Call) ArmAfterRenewal(first time.Duration) {
	c.arm(c.Wait - first)
}

// arm arms the deadline, due after d, unless the call returned.
func (c *Call) arm(d time.Duration) {
	c.mu.Lock() // fire may run before deadline is set
	if !c.returned {
		c.deadline = c.clock.AfterFunc(d, c.fire)
	}
	c.mu.Unlock()
}

// fire runs when the wait passes, then again when MaxExecution does. When
// the lease's first renewal is due after the wait, the renewals start here.
func (c *Call) fire() {
	if every := RenewEvery(c.LockTTL); every > c.Wait {
		c.bound.RenewLease(every-c.Wait, false)
	}
	if c.MaxExecution > c.Wait && !c.timedOut.Swap(true) {
		c.mu.Lock()
		if !c.returned {
			c.deadline.Reset(c.MaxExecution - c.Wait)
		}
		c.mu.Unlock()
		c.signal()
		return
	}
	cut := CutAtMaxExecution
	if c.MaxExecution <= c.Wait {
		cut = CutAtWait
	}
	c.bound.DeadlinePassed(cut)
	c.Cancel(cut)
}

// Returned stops the deadline, which is never armed again, and cancels
// the call's context: the call returned.
func (c *Call) Returned() {
	c.mu.Lock() // fire may be re-arming it, the first renewal arming it
	if c.deadline != nil {
		c.deadline.Stop()
	}
	c.returned = true
	c.mu.Unlock()
	c.Cancel(nil)
}

// End tells the client's wait that the call ended: what it did is ready.
func (c *Call) End() {
	c.ended.Store(true)
	c.signal()
}

// signal wakes the client's goroutine. wake holds one signal: one dropped
// because it is full leaves the client a signal to see what was set.
func (c *Call) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// An Event is what a client's wait for its call saw.
type Event uint8

const (
	CallEnded  Event = iota + 1 // the call ended (End)
	WaitPassed                  // the client's wait passed, the call still running
	ClientLeft                  // the client went away
)

// Await waits for the next event of the client's wait: the call ended, the
// wait passed, or gone closed — the client left. A client still waiting
// after it left passes a nil gone.
func (c *Call) Await(gone <-chan struct{}) Event {
	select {
	case <-c.wake:
		if c.ended.Load() {
			return CallEnded
		}
		return WaitPassed
	case <-gone:
		return ClientLeft
	}
}
