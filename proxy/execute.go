package proxy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptrace"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// execute forwards the first request of a key, whose lease this handler
// took at q.began, and settles the key — records the response or releases
// the lease — in a defer, so that settling also happens when the reverse
// proxy aborts the response with http.ErrAbortHandler.
//
// The upstream call runs on detached, a context without the client's
// cancellation: a client that gives up must not leave an outcome nobody
// records (docs/guarantees.md). It is bounded by upstream.timeout, and by
// Abort.
func (h *Handler) execute(detached context.Context, w http.ResponseWriter, q *request) {
	rt := q.route
	q.executed = true
	h.settling.Add(1) // until the key is settled, in settleKey
	ctx, cancel := context.WithTimeout(detached, h.upstreamTimeout)
	q.capture = capture{rw: w, limit: rt.policy.MaxResponseBody, route: rt, keyHash: q.keyHash, head: q.in.Method == http.MethodHead}
	q.done = h.owners.add(q.keyHash, cancel)
	if h.aborted.Load() {
		cancel()
	}
	h.startLease(detached, q)

	out := q.in.WithContext(httptrace.WithClientTrace(ctx, q.capture.trace()))
	setBody(out, q.body, &q.bodyReader)
	start := time.Now()
	defer func() {
		p := recover()
		cancel()
		rt.metrics.upstream.Observe(time.Since(start).Seconds())
		q.status = q.capture.status
		q.outcome = h.conclude(detached, q, p != nil)
		if p != nil {
			panic(p)
		}
	}()
	h.rp.ServeHTTP(&q.capture, out)
	dropControlTrailers(w.Header(), rt.policy.UpstreamControlHeader)
}

// conclude decides what the store keeps of an executed request — its
// response, a 502, or nothing (the key is released) —, starts settling the
// key accordingly, and returns the request's outcome.
//
// ctx is detached from the client, which may be long gone; every store
// operation is bounded by the store's own timeout.
func (h *Handler) conclude(ctx context.Context, q *request, aborted bool) Outcome {
	c, pol := &q.capture, &q.route.policy
	leaseLost := q.lease.stop()

	var rec *store.Record
	outcome := OutcomeUpstreamError
	var f failure // of the upstream exchange, 0 when it answered
	if c.upstreamErr != nil {
		f = upstreamFailure(c.upstreamErr, c.sent.Load())
	}
	switch {
	case f == failUnreachable:
		// Nothing reached the upstream: a retry executes safely.
	case f == failResponseTooLarge:
		// The upstream answered, so it executed the request; its answer
		// is too large to read. A retry would execute again and fail the
		// same way: the 502 is kept whatever on_upstream_error says.
		rec = h.problemRecord(q, f)
	case f != 0 || aborted || !c.responseStarted || c.cutShort(q.in.Method):
		// The upstream may have acted on the request; its answer was lost
		// or cut short. on_upstream_error chooses between at-least-once and
		// at-most-once.
		if pol.KeepOnUpstreamError {
			rec = h.problemRecord(q, failResponseCutShort)
		}
	case !c.recording:
		// A release status: "not processed, try again".
		outcome = OutcomeReleased
	default:
		outcome = OutcomeExecuted
		rec = c.record(q.fp)
		if rec.BodyOmitted {
			q.omitReason = omitTooLarge
		}
	}

	if rec == nil {
		h.settleKey(ctx, q, "could not release key before its lease expired; it unlocks at lock_ttl",
			func() attempt { return h.tryRelease(ctx, q) })
	} else {
		q.rec = rec
		h.settleKey(ctx, q, "could not record response before its lease expired; a retry with its key will execute again",
			func() attempt { return h.tryComplete(ctx, q, leaseLost) })
	}
	return outcome
}

// problemRecord is the record of a 502 the proxy answered (or, for a
// response cut short, would have): the problem response the client was
// sent when the capture has it, else the one of f.
func (h *Handler) problemRecord(q *request, f failure) *store.Record {
	c := &q.capture
	if c.upstreamErr != nil && c.recording && !c.omitted && c.responseStarted {
		return c.record(q.fp)
	}
	p, detail, _ := problemFor(q, f, c.upstreamErr)
	return problemRecord(p, detail, q.fp)
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
// store is full (q.held) keeps its lease renewed meanwhile: a full store
// must never let a retry execute again.
func (h *Handler) settleKey(ctx context.Context, q *request, giveUp string, try func() attempt) {
	if try() == settled {
		h.owners.remove(q.keyHash, q.done)
		h.settling.Add(-1)
		return
	}
	go func() {
		defer h.settling.Add(-1)
		defer h.owners.remove(q.keyHash, q.done)
		renewEvery := max(q.route.policy.LockTTL/3, time.Millisecond)
		backoff := 50 * time.Millisecond
		for {
			wait := backoff
			if q.held {
				wait = min(wait, renewEvery)
			}
			if q.lease.until.Sub(h.clock.Now()) <= wait {
				h.log.Warn(giveUp, "route", q.route.label, "key_hash", q.keyHash)
				return
			}
			<-h.clock.After(wait)
			if q.held && h.renewHeld(ctx, q) {
				return // lost: another owner has the key
			}
			if try() == settled {
				return
			}
			backoff = min(2*backoff, time.Second)
		}
	}()
}

// tryComplete stores q.rec. When the store has no room for it, it stores
// the record without its body instead; when there is no room for that
// either, it holds the key (q.held) so that no retry executes again, and
// the caller keeps trying.
func (h *Handler) tryComplete(ctx context.Context, q *request, leaseLost bool) attempt {
	ttl := q.route.policy.TTL
	err := h.store.Complete(ctx, q.keyHash, q.token, q.rec, ttl)
	if errors.Is(err, store.ErrFull) && len(q.rec.Body) > 0 {
		q.rec, q.omitReason = withoutBody(q.rec), omitStoreFull
		err = h.store.Complete(ctx, q.keyHash, q.token, q.rec, ttl)
	}
	switch {
	case err == nil:
		if q.omitReason != "" {
			h.metrics.bodyOmitted[q.omitReason].Inc()
		}
		if q.held {
			h.log.Info("store had room again: response recorded", "route", q.route.label, "key_hash", q.keyHash)
		}
		return settled
	case errors.Is(err, store.ErrLockLost):
		if !leaseLost {
			h.lockLost(q, "complete", lostAfterDelivered)
		}
		return settled
	case errors.Is(err, store.ErrFull):
		if !q.held {
			q.held = true
			h.log.Error("store full: no room to record a response, even without its body; the key stays locked (retries get 409) until the record fits",
				"route", q.route.label, "key_hash", q.keyHash, "error", err)
		}
		return retry
	}
	h.log.Warn("could not record response yet; retrying until its lease expires", "route", q.route.label, "key_hash", q.keyHash, "error", err)
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
func (h *Handler) tryRelease(ctx context.Context, q *request) attempt {
	err := h.store.Release(ctx, q.keyHash, q.token)
	if err == nil {
		return settled
	}
	h.log.Warn("could not release key yet; retrying until its lease expires", "route", q.route.label, "key_hash", q.keyHash, "error", err)
	return retry
}
