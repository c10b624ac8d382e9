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

// execute forwards the first request of a key, whose lease this handler
// holds, and settles the key — records the response or releases the lease —
// in a defer, so that settling also happens when the reverse proxy aborts
// the response with http.ErrAbortHandler.
//
// The upstream call runs on a context detached from the client: a client
// that gives up must not leave an outcome nobody records (SPEC §5). It is
// bounded by upstream.timeout, and by Abort.
func (h *Handler) execute(w http.ResponseWriter, r *http.Request, x *exchange, key, token string, fp store.Fingerprint, body []byte) {
	rt := x.route
	h.settling.Add(1) // until the key is settled, in settleKey
	detached := context.WithoutCancel(r.Context())
	ctx, cancel := context.WithTimeout(detached, h.upstreamTimeout)
	f := &flight{capture: capture{rw: w, limit: rt.policy.MaxResponseBody, route: rt}}
	done := h.owners.add(key, cancel)
	if h.aborted.Load() {
		cancel()
	}
	h.startLease(detached, f, rt, x.keyHash, key, token)

	out := r.WithContext(httptrace.WithClientTrace(ctx, f.capture.trace()))
	setBody(out, body)
	start := time.Now()
	defer func() {
		p := recover()
		cancel()
		rt.metrics.upstream.Observe(time.Since(start).Seconds())
		lost, until := f.lease.stop()
		h.settle(detached, x, r.Method, key, token, fp, &f.capture, p != nil, lost, until, done)
		if p != nil {
			panic(p)
		}
	}()
	h.rp.ServeHTTP(&f.capture, out)
}

// flight is the state of one executed request, allocated once.
type flight struct {
	capture capture
	lease   lease
}

// settle records the outcome of an executed request in the store.
//
// ctx is detached from the client, which may be long gone; every store
// operation is bounded by the store's own timeout. done is closed once the
// key is settled, waking local waiters.
func (h *Handler) settle(ctx context.Context, x *exchange, method, key, token string, fp store.Fingerprint, c *capture, aborted, leaseLost bool, until time.Time, done chan struct{}) {
	pol := &x.route.policy
	x.status = c.status

	var rec *store.Record
	switch {
	case c.upstreamErr != nil && !c.sent.Load():
		// Nothing reached the upstream: a retry executes safely.
		x.outcome = OutcomeUpstreamError
	case c.upstreamErr != nil || aborted || !c.wroteHeader || c.cutShort(method):
		// The upstream may have acted on the request; its answer was lost
		// or cut short. on_upstream_error chooses between at-least-once and
		// at-most-once.
		x.outcome = OutcomeUpstreamError
		if pol.KeepOnUpstreamError {
			if c.upstreamErr != nil && c.recording && !c.omitted {
				rec = c.record(fp) // the 502 the client was sent
			} else {
				rec = problemRecord(probUpstreamError, "The upstream response was cut short; the outcome of the request is unknown.", fp)
			}
		}
	case !c.recording:
		// A release status: "not processed, try again".
		x.outcome = OutcomeReleased
	default:
		x.outcome = OutcomeExecuted
		rec = c.record(fp)
	}

	rt, keyHash := x.route, x.keyHash
	if rec == nil {
		h.settleKey(key, until, done, "could not release key before its lease expired; it unlocks at lock_ttl", rt, keyHash,
			func() bool { return h.tryRelease(ctx, rt, keyHash, key, token) })
		return
	}
	h.settleKey(key, until, done, "could not record response before its lease expired; a retry with its key will execute again", rt, keyHash,
		func() bool { return h.tryComplete(ctx, rt, keyHash, key, token, rec, leaseLost) })
}

// settleKey runs try — record or release — until it succeeds. When the
// store is briefly unavailable it keeps trying in the background (the
// client already has its response) until the lease would have expired,
// after which the store settles the key on its own. done is closed at the
// end, waking local waiters.
func (h *Handler) settleKey(key string, until time.Time, done chan struct{}, giveUp string, rt *route, keyHash string, try func() bool) {
	if try() {
		h.owners.remove(key, done)
		h.settling.Add(-1)
		return
	}
	go func() {
		defer h.settling.Add(-1)
		defer h.owners.remove(key, done)
		backoff := 50 * time.Millisecond
		for time.Until(until) > backoff {
			t := time.NewTimer(backoff)
			<-t.C
			if try() {
				return
			}
			backoff = min(2*backoff, time.Second)
		}
		h.log.Warn(giveUp, "route", rt.label, "key_hash", keyHash)
	}()
}

// tryComplete stores rec and reports whether the key is settled: recorded,
// or lost to another owner. false means the store was unavailable.
func (h *Handler) tryComplete(ctx context.Context, rt *route, keyHash, key, token string, rec *store.Record, leaseLost bool) bool {
	err := h.complete(ctx, key, token, rec, rt.policy.TTL)
	switch {
	case err == nil:
		return true
	case errors.Is(err, store.ErrLockLost):
		if !leaseLost {
			h.lockLost(rt, keyHash, "complete")
		}
		return true
	}
	h.log.Warn("could not record response yet; retrying until its lease expires", "route", rt.label, "key_hash", keyHash, "error", err)
	return false
}

// tryRelease releases the key and reports whether it is settled.
func (h *Handler) tryRelease(ctx context.Context, rt *route, keyHash, key, token string) bool {
	err := h.release(ctx, key, token)
	if err == nil {
		return true
	}
	h.log.Warn("could not release key yet; retrying until its lease expires", "route", rt.label, "key_hash", keyHash, "error", err)
	return false
}

func (h *Handler) lockLost(rt *route, keyHash, during string) {
	h.metrics.lockLost.Inc()
	h.log.Warn("lease on key lost: it expired while the upstream ran and another request may have executed it; this response was delivered but not recorded",
		"route", rt.label, "key_hash", keyHash, "during", during, "lock_ttl", rt.policy.LockTTL.String())
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

func (h *Handler) startLease(ctx context.Context, f *flight, rt *route, keyHash, key, token string) {
	ttl := rt.policy.LockTTL
	every := max(ttl/3, time.Millisecond)
	l := &f.lease
	l.until = time.Now().Add(ttl) // Begin took it a moment ago: a safe underestimate
	renew := func() {
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, every)
		err := h.extend(rctx, key, token, ttl)
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
			h.lockLost(rt, keyHash, "renewal")
		default:
			// The store may come back before the lease runs out.
			h.log.Warn("could not renew lease", "route", rt.label, "key_hash", keyHash, "error", err)
			l.timer.Reset(every / 4)
		}
	}
	l.mu.Lock()
	l.timer = time.AfterFunc(every, renew)
	l.mu.Unlock()
}

// stop ends renewals and reports whether the lease was found lost, and
// until when it holds otherwise.
func (l *lease) stop() (lost bool, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	l.timer.Stop()
	return l.lost, l.until
}
