package execution

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// renewParts is the rule of lease renewal: a lease is renewed once each
// renewParts-th of its lock_ttl has passed. RenewEvery applies it, and
// MinLockTTL derives from it what a lease can outlive; nothing else
// repeats it.
const renewParts = 3

// RenewEvery is how often a lease of ttl is renewed: after a third of it,
// so a fast upstream costs no store round trip beyond begin and complete.
func RenewEvery(ttl time.Duration) time.Duration { return max(ttl/renewParts, time.Millisecond) }

// MinLockTTL is the shortest lock_ttl whose lease outlives an outage of d
// that begins while it is renewed (a store's failover): renewed every
// third of lock_ttl, a lease has at least two thirds of lock_ttl left when
// the outage begins, and those must cover d.
func MinLockTTL(d time.Duration) time.Duration { return d * renewParts / (renewParts - 1) }

// A Lease renews the store lease on a key while its upstream call runs.
// The first renewal happens after a third of lock_ttl, so a fast upstream
// costs no store round trip beyond begin and complete. The zero Lease is
// ready; Start notes when it runs out.
type Lease struct {
	mu      sync.Mutex
	timer   Timer
	stopped bool
	lost    bool
	until   time.Time // when the lease expires, as far as this process knows
	// armsDeadline is set until the first renewal arms the call's deadline.
	armsDeadline bool
}

// Holder is what a Lease renews for: the key and owner token it extends in
// the store, and what its renewals report.
type Holder interface {
	// Extend renews the lease in the store for ttl, as store.Store's
	// Extend does for the holder's key and token.
	Extend(ctx context.Context, ttl time.Duration) error
	// FirstRenewal runs when the first renewal, due after first, fires
	// on a lease renewed with thenDeadline: it arms the call's deadline,
	// before the store is called.
	FirstRenewal(first time.Duration)
	// Lost reports a renewal that found the lease lost (store.ErrLockLost).
	Lost()
	// RenewFailed reports a renewal that failed otherwise; the next one
	// is tried sooner.
	RenewFailed(err error)
}

// Start notes the lease, which runs from began, when Begin was sent, for
// ttl: so its end is never overestimated.
func (l *Lease) Start(began time.Time, ttl time.Duration) { l.until = began.Add(ttl) }

// Renew renews the lease of ttl from a timer of clock, the first time
// after first and then every RenewEvery, until the lease stops; it does
// nothing when renewals have started. With thenDeadline, the first renewal
// calls h.FirstRenewal, which arms the call's deadline. The deadline or
// the first renewal, whichever is due first, is armed when the call
// starts, and arms the other when it fires: a call shorter than both,
// nearly every call, arms one timer, not two.
func (l *Lease) Renew(ctx context.Context, clock Clock, h Holder, ttl, first time.Duration, thenDeadline bool) {
	every := RenewEvery(ttl)
	renew := func() {
		l.mu.Lock()
		arm := l.armsDeadline
		l.armsDeadline = false
		l.mu.Unlock()
		if arm {
			// Before the store is called, which must not delay it.
			h.FirstRenewal(first)
		}
		sent := clock.Now()
		rctx, cancel := context.WithTimeout(ctx, every)
		err := h.Extend(rctx, ttl)
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
			h.Lost()
		default:
			// The store may come back before the lease runs out.
			h.RenewFailed(err)
			l.timer.Reset(every / 4)
		}
	}
	l.mu.Lock()
	if !l.stopped && l.timer == nil {
		l.timer, l.armsDeadline = clock.AfterFunc(first, renew), thenDeadline
	}
	l.mu.Unlock()
}

// Stop ends renewals and reports whether the lease was found lost. From
// then on the holder's settling renews it (ExtendTo), and a renewal still
// on its way may lengthen it: both under l.mu.
func (l *Lease) Stop() (lost bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	if l.timer != nil {
		l.timer.Stop()
	}
	return l.lost
}

// End is when the lease expires, as far as this process knows.
func (l *Lease) End() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// ExtendTo notes a renewal that makes the lease last until t, unless one
// already noted lasts longer.
func (l *Lease) ExtendTo(t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t.After(l.until) {
		l.until = t
	}
}
