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

	// rec is the record being stored; omitReason says why it has no body
	// ("" when it has), for idempotency_proxy_records_body_omitted_total.
	rec        *store.Record
	omitReason string
	// held is set once the store had no room even for rec without its
	// body: the key stays locked, its lease renewed, until rec fits.
	held bool
}

// execute forwards the first request of a key, whose lease this handler
// took at began, and settles the key — records the response or releases
// the lease — in a defer, so that settling also happens when the reverse
// proxy aborts the response with http.ErrAbortHandler.
//
// The upstream call runs on detached, a context without the client's
// cancellation: a client that gives up must not leave an outcome nobody
// records (docs/guarantees.md). It is bounded by upstream.timeout, and by Abort.
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
	case c.upstreamErr != nil && responseHeaderTooLarge(c.upstreamErr):
		// The upstream answered, so it executed the request; its answer
		// is too large to read. A retry would execute again and fail the
		// same way: the 502 is kept whatever on_upstream_error says.
		outcome = OutcomeUpstreamError
		rec = c.recordOr(f.fp, probUpstreamError, "The upstream answered, but its response headers are larger than the proxy accepts; the request was executed and its response cannot be delivered.")
	case c.upstreamErr != nil || aborted || !c.wroteHeader || c.cutShort(method):
		// The upstream may have acted on the request; its answer was lost
		// or cut short. on_upstream_error chooses between at-least-once and
		// at-most-once.
		outcome = OutcomeUpstreamError
		if pol.KeepOnUpstreamError {
			if c.upstreamErr != nil {
				rec = c.recordOr(f.fp, probUpstreamError, "The upstream response was cut short; the outcome of the request is unknown.")
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
		if rec.BodyOmitted {
			f.omitReason = omitTooLarge
		}
	}

	if rec == nil {
		h.settleKey(ctx, f, "could not release key before its lease expired; it unlocks at lock_ttl",
			func() attempt { return h.tryRelease(ctx, f) })
	} else {
		f.rec = rec
		h.settleKey(ctx, f, "could not record response before its lease expired; a retry with its key will execute again",
			func() attempt { return h.tryComplete(ctx, f, leaseLost) })
	}
	return outcome
}

// attempt is the result of one try at settling a key.
type attempt uint8

const (
	settled attempt = iota // recorded, released, or lost to another owner
	retry                  // the store was unavailable
)

// settleKey runs try — record or release — until the key is settled. When
// the store is briefly unavailable it keeps trying in the background (the
// client already has its response) until the lease would have expired,
// after which the store settles the key on its own. A key held because the
// store is full (f.held) keeps its lease renewed meanwhile: a full store
// must never let a retry execute again.
func (h *Handler) settleKey(ctx context.Context, f *flight, giveUp string, try func() attempt) {
	if try() == settled {
		h.owners.remove(f.key, f.done)
		h.settling.Add(-1)
		return
	}
	go func() {
		defer h.settling.Add(-1)
		defer h.owners.remove(f.key, f.done)
		renewEvery := max(f.route.policy.LockTTL/3, time.Millisecond)
		backoff := 50 * time.Millisecond
		for {
			wait := backoff
			if f.held {
				wait = min(wait, renewEvery)
			}
			if time.Until(f.lease.until) <= wait {
				h.log.Warn(giveUp, "route", f.route.label, "key_hash", f.keyHash)
				return
			}
			t := time.NewTimer(wait)
			<-t.C
			if f.held && h.renewHeld(ctx, f) {
				return // lost: another owner has the key
			}
			if try() == settled {
				return
			}
			backoff = min(2*backoff, time.Second)
		}
	}()
}

// renewHeld extends the lease of a key held for lack of space and reports
// whether the lease was lost.
func (h *Handler) renewHeld(ctx context.Context, f *flight) (lost bool) {
	ttl := f.route.policy.LockTTL
	sent := time.Now()
	err := h.store.Extend(ctx, f.key, f.token, ttl)
	switch {
	case err == nil:
		f.lease.until = sent.Add(ttl)
	case errors.Is(err, store.ErrLockLost):
		h.lockLost(f, "renewal while the store was full")
		return true
	default:
		h.log.Warn("could not renew lease of a key held while the store is full", "route", f.route.label, "key_hash", f.keyHash, "error", err)
	}
	return false
}

// tryComplete stores f.rec. When the store has no room for it, it stores
// the record without its body instead; when there is no room for that
// either, it holds the key (f.held) so that no retry executes again, and
// the caller keeps trying.
func (h *Handler) tryComplete(ctx context.Context, f *flight, leaseLost bool) attempt {
	ttl := f.route.policy.TTL
	err := h.store.Complete(ctx, f.key, f.token, f.rec, ttl)
	if errors.Is(err, store.ErrFull) && len(f.rec.Body) > 0 {
		f.rec, f.omitReason = withoutBody(f.rec), omitStoreFull
		err = h.store.Complete(ctx, f.key, f.token, f.rec, ttl)
	}
	switch {
	case err == nil:
		if f.omitReason != "" {
			h.metrics.bodyOmitted[f.omitReason].Inc()
		}
		if f.held {
			h.log.Info("store had room again: response recorded", "route", f.route.label, "key_hash", f.keyHash)
		}
		return settled
	case errors.Is(err, store.ErrLockLost):
		if !leaseLost {
			h.lockLost(f, "complete")
		}
		return settled
	case errors.Is(err, store.ErrFull):
		if !f.held {
			f.held = true
			h.log.Error("store full: no room to record a response, even without its body; the key stays locked (retries get 409) until the record fits",
				"route", f.route.label, "key_hash", f.keyHash, "error", err)
		}
		return retry
	}
	h.log.Warn("could not record response yet; retrying until its lease expires", "route", f.route.label, "key_hash", f.keyHash, "error", err)
	return retry
}

// withoutBody is rec with its body left out, for a store with no room for it.
func withoutBody(rec *store.Record) *store.Record {
	out := *rec
	out.Body, out.BodyOmitted = nil, true
	out.Header = make(map[string][]string, len(rec.Header))
	for k, v := range rec.Header {
		out.Header[k] = v
	}
	if _, ok := out.Header["Content-Length"]; ok {
		out.Header["Content-Length"] = headerZero
	}
	return &out
}

// tryRelease releases the key.
func (h *Handler) tryRelease(ctx context.Context, f *flight) attempt {
	err := h.store.Release(ctx, f.key, f.token)
	if err == nil {
		return settled
	}
	h.log.Warn("could not release key yet; retrying until its lease expires", "route", f.route.label, "key_hash", f.keyHash, "error", err)
	return retry
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
		err := h.store.Extend(rctx, f.key, f.token, ttl)
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
