package execution

import (
	"sync/atomic"
	"time"
)

// Callers runs upstream calls on goroutines that stay for
// the next call. A goroutine started for each call begins with a small
// stack, grows it — copying it — as the reverse proxy and the record's
// encoding go deeper, and frees it when it exits; the next call's
// goroutine grows it again. Under load that was 3% of a memory miss's
// proxy CPU, and 17% of the handler's own (docs/performance.md). A
// goroutine waiting for the next call keeps the stack it grew.
//
// A call never waits for a goroutine: when none is idle, it gets a new
// one, as before. At most maxIdle wait at once, and one that waited
// idleTimeout without a call exits, so a burst leaves nothing behind.
type Callers[T any] struct {
	calls       chan T // unbuffered: a send succeeds only to an idle goroutine
	idle        atomic.Int32
	run         func(T) // the call
	maxIdle     int32
	idleTimeout time.Duration
}

// The callers a handler keeps: as many idle as a busy sidecar has calls
// in flight, for as long as a pause in its traffic.
const (
	MaxIdleCallers    = 256
	CallerIdleTimeout = 10 * time.Second
)

// NewCallers returns Callers running run, keeping at most maxIdle
// goroutines idle, each for idleTimeout at most.
func NewCallers[T any](run func(T), maxIdle int32, idleTimeout time.Duration) *Callers[T] {
	return &Callers[T]{calls: make(chan T), run: run, maxIdle: maxIdle, idleTimeout: idleTimeout}
}

// Start runs q's call on an idle goroutine, or on a new one.
func (c *Callers[T]) Start(q T) {
	select {
	case c.calls <- q:
	default:
		go c.serve(q)
	}
}

// serve runs q's call, then the calls it is handed, until it has waited
// c.idleTimeout for one, or as soon as c.maxIdle others are idle.
func (c *Callers[T]) serve(q T) {
	var idle *time.Timer
	for {
		c.run(q)
		var zero T
		q = zero // not kept while idle
		if c.idle.Add(1) > c.maxIdle {
			c.idle.Add(-1)
			return
		}
		if idle == nil {
			idle = time.NewTimer(c.idleTimeout)
		} else {
			idle.Reset(c.idleTimeout)
		}
		select {
		case q = <-c.calls:
			c.idle.Add(-1)
		case <-idle.C:
			c.idle.Add(-1)
			return
		}
	}
}
