package proxy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// flight is one executed request: what its capture records, its lease, and
// what settling its key needs. It is allocated once per execution.
type flight struct {
	capture capture
	lease   lease

	route      *route
	keyHash    string
	key, token string
	fp         store.Fingerprint
	// done closes when the key is settled, waking local waiters.
	done chan struct{}
}

// execute forwards the first request of a key, whose lease this handler
// took at began, and settles the key — records the response or releases
// the lease — in a defer, so that settling also happens when the reverse
// proxy aborts the response with http.ErrAbortHandler.
//
// The upstream call runs on detached, a context without the client's
// cancellation: a client that gives up must not leave an outcome nobody
// records (SPEC §5). It is bounded by upstream.timeout, and by Abort.
func (h *Handler) execute(detached context.Context, w http.ResponseWriter, r *http.Request, x *exchange, key, token string, fp store.Fingerprint, body []byte, began time.Time) {
	rt := x.route
	h.settling.Add(1) // until the key is settled, in settleKey
	ctx, cancel := context.WithTimeout(detached, h.upstreamTimeout)
	f := &flight{
		capture: capture{rw: w, limit: rt.policy.MaxResponseBody, route: rt},
		route:   rt, keyHash: x.keyHash, key: key, token: token, fp: fp,
	}
	f.done = h.owners.add(key, cancel)
	if h.aborted.Load() {
		cancel()
	}
	h.startLease(detached, f, began)

	out := r.WithContext(httptrace.WithClientTrace(ctx, f.capture.trace()))
	setBody(out, body)
	start := time.Now()
	defer func() {
		p := recover()
		cancel()
		rt.metrics.upstream.Observe(time.Since(start).Seconds())
		x.status = f.capture.status
		x.outcome = h.settle(detached, f, r.Method, p != nil)
		if p != nil {
			panic(p)
		}
	}()
	h.rp.ServeHTTP(&f.capture, out)
}

// settle decides what the store keeps of an executed request, starts
// keeping it, and returns the request's outcome.
//
// ctx is detached from the client, which may be long gone; every store
// operation is bounded by the store's own timeout.
func (h *Handler) settle(ctx context.Context, f *flight, method string, aborted bool) Outcome {
	c, pol := &f.capture, &f.route.policy
	leaseLost := f.lease.stop()

	var outcome Outcome
	var rec *store.Record
	switch {
	case c.upstreamErr != nil && !c.sent.Load():
		// Nothing reached the upstream: a retry executes safely.
		outcome = OutcomeUpstreamError
	case c.upstreamErr != nil || aborted || !c.wroteHeader || c.cutShort(method):
		// The upstream may have acted on the request; its answer was lost
		// or cut short. on_upstream_error chooses between at-least-once and
		// at-most-once.
		outcome = OutcomeUpstreamError
		if pol.KeepOnUpstreamError {
			if c.upstreamErr != nil && c.recording && !c.omitted {
				rec = c.record(f.fp) // the 502 the client was sent
			} else {
				rec = problemRecord(probUpstreamError, "The upstream response was cut short; the outcome of the request is unknown.", f.fp)
			}
		}
	case !c.recording:
		// A release status: "not processed, try again".
		outcome = OutcomeReleased
	default:
		outcome = OutcomeExecuted
		rec = c.record(f.fp)
	}

	if rec == nil {
		h.settleKey(f, "could not release key before its lease expired; it unlocks at lock_ttl",
			func() bool { return h.tryRelease(ctx, f) })
	} else {
		h.settleKey(f, "could not record response before its lease expired; a retry with its key will execute again",
			func() bool { return h.tryComplete(ctx, f, rec, leaseLost) })
	}
	return outcome
}

// settleKey runs try — record or release — until it succeeds. When the
// store is briefly unavailable it keeps trying in the background (the
// client already has its response) until the lease would have expired,
// after which the store settles the key on its own.
func (h *Handler) settleKey(f *flight, giveUp string, try func() bool) {
	if try() {
		h.owners.remove(f.key, f.done)
		h.settling.Add(-1)
		return
	}
	go func() {
		defer h.settling.Add(-1)
		defer h.owners.remove(f.key, f.done)
		backoff := 50 * time.Millisecond
		for time.Until(f.lease.until) > backoff {
			t := time.NewTimer(backoff)
			<-t.C
			if try() {
				return
			}
			backoff = min(2*backoff, time.Second)
		}
		h.log.Warn(giveUp, "route", f.route.label, "key_hash", f.keyHash)
	}()
}

// tryComplete stores rec and reports whether the key is settled: recorded,
// or lost to another owner. false means the store was unavailable.
func (h *Handler) tryComplete(ctx context.Context, f *flight, rec *store.Record, leaseLost bool) bool {
	err := h.complete(ctx, f.key, f.token, rec, f.route.policy.TTL)
	switch {
	case err == nil:
		return true
	case errors.Is(err, store.ErrLockLost):
		if !leaseLost {
			h.lockLost(f, "complete")
		}
		return true
	}
	h.log.Warn("could not record response yet; retrying until its lease expires", "route", f.route.label, "key_hash", f.keyHash, "error", err)
	return false
}

// tryRelease releases the key and reports whether it is settled.
func (h *Handler) tryRelease(ctx context.Context, f *flight) bool {
	err := h.release(ctx, f.key, f.token)
	if err == nil {
		return true
	}
	h.log.Warn("could not release key yet; retrying until its lease expires", "route", f.route.label, "key_hash", f.keyHash, "error", err)
	return false
}

func (h *Handler) lockLost(f *flight, during string) {
	h.metrics.lockLost.Inc()
	h.log.Warn("lease on key lost: it expired while the upstream ran and another request may have executed it; this response was delivered but not recorded",
		"route", f.route.label, "key_hash", f.keyHash, "during", during, "lock_ttl", f.route.policy.LockTTL.String())
}

// lease renews the store lease on a key while its upstream call runs. The
// first renewal happens after a third of lock_ttl, so a fast upstream costs
// no store round trip beyond begin and complete.
type lease struct {
	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	lost    bool
	until   time.Time // when the lease expires, as far as this process knows
}

// startLease renews f's lease from a timer; began is when Begin was sent,
// so until never overestimates the lease.
func (h *Handler) startLease(ctx context.Context, f *flight, began time.Time) {
	ttl := f.route.policy.LockTTL
	every := max(ttl/3, time.Millisecond)
	l := &f.lease
	l.until = began.Add(ttl)
	renew := func() {
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, every)
		err := h.extend(rctx, f.key, f.token, ttl)
		cancel()
		l.mu.Lock()
		defer l.mu.Unlock()
		switch {
		case l.stopped:
		case err == nil:
			l.until = sent.Add(ttl)
			l.timer.Reset(every)
		case errors.Is(err, store.ErrLockLost):
			l.lost = true
			h.lockLost(f, "renewal")
		default:
			// The store may come back before the lease runs out.
			h.log.Warn("could not renew lease", "route", f.route.label, "key_hash", f.keyHash, "error", err)
			l.timer.Reset(every / 4)
		}
	}
	l.mu.Lock()
	l.timer = time.AfterFunc(every, renew)
	l.mu.Unlock()
}

// stop ends renewals and reports whether the lease was found lost. until
// no longer changes afterwards.
func (l *lease) stop() (lost bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	l.timer.Stop()
	return l.lost
}
