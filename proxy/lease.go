package proxy

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// clock is the time source of leases and of background settling: real
// time in production; tests drive a fake one, so that none sleeps for a
// lease to run out.
type clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func()) timer
	// After sends on the returned channel once d has passed.
	After(d time.Duration) <-chan time.Time
}

// timer is the part of *time.Timer a lease uses.
type timer interface {
	Reset(d time.Duration) bool
	Stop() bool
}

type realClock struct{}

func (realClock) Now() time.Time                            { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) timer { return time.AfterFunc(d, f) }
func (realClock) After(d time.Duration) <-chan time.Time    { return time.After(d) }

// lease renews the store lease on a key while its upstream call runs. The
// first renewal happens after a third of lock_ttl, so a fast upstream costs
// no store round trip beyond begin and complete.
type lease struct {
	mu      sync.Mutex
	timer   timer
	stopped bool
	lost    bool
	until   time.Time // when the lease expires, as far as this process knows
	// armsDeadline is set until the first renewal arms the call's deadline.
	armsDeadline bool
}

// renewEvery is how often a lease of ttl is renewed: after a third of it,
// so a fast upstream costs no store round trip beyond begin and complete.
func renewEvery(ttl time.Duration) time.Duration { return max(ttl/3, time.Millisecond) }

// startLease notes q's lease, which runs from q.began, when Begin was sent,
// so until never overestimates it.
func (q *request) startLease() { q.lease.until = q.began.Add(q.route.policy.LockTTL) }

// renewLease renews q's lease from a timer, the first time after first
// and then every renewEvery, until the lease stops; it does nothing when
// renewals have started. With thenDeadline, the first renewal arms the
// call's deadline (armDeadline), due upstream.timeout after the call
// started. The deadline or the first renewal, whichever is due first, is
// armed when the call starts, and arms the other when it fires (see
// timerFired): a call shorter than both, nearly every call, arms one timer,
// not two.
func (h *Handler) renewLease(ctx context.Context, q *request, first time.Duration, thenDeadline bool) {
	ttl := q.route.policy.LockTTL
	every := renewEvery(ttl)
	l := &q.lease
	renew := func() {
		l.mu.Lock()
		arm := l.armsDeadline
		l.armsDeadline = false
		l.mu.Unlock()
		if arm {
			// Before the store is called, which must not delay it.
			h.armDeadline(q, h.upstreamTimeout-first)
		}
		sent := h.clock.Now()
		rctx, cancel := context.WithTimeout(ctx, every)
		err := h.store.Extend(rctx, q.keyHash, q.token, ttl)
		cancel()
		l.mu.Lock()
		defer l.mu.Unlock()
		switch {
		case l.stopped:
			// Answered after the call ended: the record is retried in
			// this lease, which now runs from this renewal (unless
			// settling renewed it since).
			if end := sent.Add(ttl); err == nil && end.After(l.until) {
				l.until = end
			}
		case err == nil:
			l.until = sent.Add(ttl)
			l.timer.Reset(every)
		case errors.Is(err, store.ErrLockLost):
			l.lost = true
			h.lockLost(q, "renewal", lostWhileRunning)
		default:
			// The store may come back before the lease runs out.
			h.log.Warn("could not renew lease", "route", q.route.label, "key_hash", q.keyHash, "error", err)
			l.timer.Reset(every / 4)
		}
	}
	l.mu.Lock()
	if !l.stopped && l.timer == nil {
		l.timer, l.armsDeadline = h.clock.AfterFunc(first, renew), thenDeadline
	}
	l.mu.Unlock()
}

// stop ends renewals and reports whether the lease was found lost. From
// then on settleKey's goroutine renews it (renewHeld, renewToRecord), and
// a renewal still on its way may lengthen it: both under l.mu.
func (l *lease) stop() (lost bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	if l.timer != nil {
		l.timer.Stop()
	}
	return l.lost
}

// end is when the lease expires, as far as this process knows.
func (l *lease) end() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// extendTo notes a renewal that makes the lease last until t, unless one
// already noted lasts longer.
func (l *lease) extendTo(t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t.After(l.until) {
		l.until = t
	}
}

// renewHeld extends the lease of a key held for lack of space and reports
// whether the lease was lost.
func (h *Handler) renewHeld(ctx context.Context, q *request) (lost bool) {
	ttl := q.route.policy.LockTTL
	sent := h.clock.Now()
	err := h.store.Extend(ctx, q.keyHash, q.token, ttl)
	switch {
	case err == nil:
		q.lease.extendTo(sent.Add(ttl))
	case errors.Is(err, store.ErrLockLost):
		h.lockLost(q, "renewal while the store was full", lostAfterDelivered)
		return true
	default:
		h.log.Warn("could not renew lease of a key held while the store is full", "route", q.route.label, "key_hash", q.keyHash, "error", err)
	}
	return false
}

// Lost-lease messages, by when the loss is found: a renewal finds it while
// the upstream still runs, before any response exists; a completion after
// the response went to the client.
const (
	lostWhileRunning   = "lease on key lost while its upstream request runs: it expired, or an operator deleted it, and another request may execute it; this request's response will be delivered but not recorded"
	lostAfterDelivered = "lease on key lost: it expired, or an operator deleted it, while the upstream ran, and another request may have executed it; this response was delivered but not recorded"
)

func (h *Handler) lockLost(q *request, during, msg string) {
	h.metrics.lockLost.Inc()
	h.log.Warn(msg, "route", q.route.label, "key_hash", q.keyHash, "during", during, "lock_ttl", q.route.policy.LockTTL.String())
}
