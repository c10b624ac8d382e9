package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"runtime/debug"
	"sync"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// execute forwards the first request of a key, whose lease this handler
// took at q.began, and settles the key — records the response or releases
// the lease — once the call returns, so that settling also happens when
// the reverse proxy aborts the response with http.ErrAbortHandler.
//
// The upstream call runs in its own goroutine (call), on a context without
// the client's cancellation: a client that gives up, or is answered 504
// when upstream.timeout passes, must not leave an outcome nobody records
// (docs/guarantees.md). The call is bounded by upstream.max_execution and
// by Abort; this goroutine waits for it as long as the client does
// (await, detach.go).
func (h *Handler) execute(detached context.Context, w http.ResponseWriter, q *request) {
	h.prepareCall(detached, w, q)
	h.callers.Start(q)
	h.await(w, q)
}

// prepareCall readies q's upstream call, the lease's renewals and its
// deadline, for callers.Start.
func (h *Handler) prepareCall(detached context.Context, w http.ResponseWriter, q *request) {
	q.executed, q.h = true, h
	h.settling.Add(1) // until the key is settled, in settleKey
	ctx, cancel := context.WithCancel(detached)
	q.cancel = cancel
	h.startCapture(&q.capture, w, q)
	q.done = h.owners.Add(q.keyHash, cancel)
	if h.aborted.Load() {
		cancel()
	}
	q.wake = make(chan struct{}, 1)
	q.detached = detached
	q.lease.Start(q.began, q.route.policy.LockTTL)
	if every := execution.RenewEvery(q.route.policy.LockTTL); every <= h.wait(q) {
		h.renewLease(detached, q, every, true)
	} else {
		h.armDeadline(q, h.wait(q)) // it starts the renewals
	}

	q.upstream = q.in.WithContext(httptrace.WithClientTrace(ctx, q.capture.trace()))
	setBody(q.upstream, q.body, &q.bodyReader)
}

// startCapture readies c to capture the answer to q for w: all the
// capture knows of q's route is the policy and whether it reconciles.
func (h *Handler) startCapture(c *capture, w http.ResponseWriter, q *request) {
	*c = capture{rw: w, hdr: newHeader(), aborted: &h.aborted, limit: q.route.policy.MaxResponseBody,
		policy: &q.route.policy, reconciles: q.route.reconciles(), keyHash: q.keyHash, head: q.in.Method == http.MethodHead}
}

// call makes the upstream call of q (q.upstream) and settles its key. It
// runs in a goroutine of its own (callers): a panic of the reverse proxy
// (http.ErrAbortHandler, a response cut short) is caught here and passed
// on to the client's goroutine, which aborts the client's response with it.
func (h *Handler) call(q *request) {
	ctx := q.detached
	start := h.clock.Now()
	aborted := h.serveUpstream(q, q.upstream)
	q.capture.mu.Lock() // timerFired may be re-arming it, renewLease arming it
	if q.deadline != nil {
		q.deadline.Stop()
	}
	q.deadlineStopped = true
	q.capture.mu.Unlock()
	q.cancel()
	q.returned = h.clock.Now()
	q.upstreamTook.Store(int64(max(q.returned.Sub(start), 1)))
	q.route.metrics.upstream.Observe(q.returned.Sub(start).Seconds())
	detached := q.capture.end(h.metrics.detached)
	q.ran.status = q.capture.status
	q.ran.outcome = h.conclude(ctx, q, aborted)
	q.ran.aborted = aborted
	putHeader(q.capture.hdr)
	q.capture.hdr = nil
	if detached {
		h.detachedEnded(q)
	}
	q.ended.Store(true)
	q.signal()
}

// headers recycles the response headers of executed requests: the reverse
// proxy fills one (capture.hdr) while the client's own stays the handler's.
var headers = sync.Pool{New: func() any { return make(http.Header) }}

func newHeader() http.Header { return headers.Get().(http.Header) }

func putHeader(h http.Header) {
	clear(h)
	headers.Put(h)
}

// serveUpstream runs the reverse proxy and reports whether it panicked.
func (h *Handler) serveUpstream(q *request, out *http.Request) (panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			panicked = true
			if p != http.ErrAbortHandler {
				h.log.Error("upstream call panicked", "route", q.route.label, "key_hash", q.keyHash,
					"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			}
		}
	}()
	h.rp.ServeHTTP(&q.capture, out)
	return false
}

// conclude decides what the store keeps of an executed request — its
// response, a 502, or nothing (the key is released) —, starts settling the
// key accordingly, and returns the request's outcome.
//
// ctx is detached from the client, which may be long gone; every store
// operation is bounded by the store's own timeout.
func (h *Handler) conclude(ctx context.Context, q *request, aborted bool) Outcome {
	c, pol := &q.capture, &q.route.policy
	leaseLost := q.lease.Stop()

	var rec *store.Record
	outcome := OutcomeUpstreamError
	var f failure // of the upstream exchange, 0 when it answered
	if c.upstreamErr != nil {
		f = upstreamFailure(c.upstreamErr, c.sent.Load(), c.stopCause())
	} else if c.stopCause() == stopShutdown {
		f = failShuttingDown
	}
	switch {
	case f == failShuttingDown && c.sent.Load():
		// The upstream may still be running it, and this process is
		// exiting: the lease is left to expire at lock_ttl, as after a
		// crash, so no retry executes it before then. On a reconciling
		// route the outcome is as unknown as after a reset: the marker
		// makes the key's next owner ask the upstream, not forward it.
		marked := false
		if pol.OnUpstreamError == UpstreamErrorReconcile && q.route.reconciles() && !leaseLost {
			marked = h.markLeft(ctx, q)
		}
		h.log.Warn("shutdown_timeout passed while the upstream ran: the key stays locked until lock_ttl",
			"route", q.route.label, "key_hash", q.keyHash, "lock_ttl", pol.LockTTL.String(), "marked", marked)
		h.settled(q)
		return outcome
	case f == failUnreachable, f == failShuttingDown:
		// Nothing reached the upstream: a retry executes safely.
	case f == failResponseTooLarge:
		// The upstream answered, so it executed the request; its answer
		// is too large to read. A retry would execute again and fail the
		// same way: the 502 is kept whatever on_upstream_error says.
		rec = h.problemRecord(q, f)
	case f != 0 || aborted || !c.responseStarted || c.cutShort() || c.ambiguous && (c.withheld || pol.OnUpstreamError == UpstreamErrorKeep):
		// The upstream may have acted on the request; its answer was lost
		// or cut short, or says nothing of the outcome (ambiguous_statuses:
		// under keep, the 502 upstream-failed is recorded, not that
		// answer). on_upstream_error chooses between at-least-once and
		// at-most-once, or asks the upstream (reconcile.go).
		if pol.OnUpstreamError == UpstreamErrorReconcile && q.route.reconciles() && !leaseLost {
			return h.startReconcile(q)
		}
		if pol.OnUpstreamError == UpstreamErrorKeep {
			rec = h.problemRecord(q, failResponseCutShort)
		}
	case !c.recording:
		// A release status: "not processed, try again".
		outcome = OutcomeReleased
	case q.grpc && grpcReleased(q, &outcome):
	default:
		outcome = OutcomeExecuted
		rec = c.record(q.fp)
		if rec.BodyOmitted {
			q.omitReason = omitTooLarge
		}
	}

	if rec != nil {
		rec.Request, rec.Lookup = q.desc, q.lookup()
		if pol.ExpiredKeys == ExpiredReject {
			rec.Tombstone = pol.ExpiredKeyWindow
		}
	}
	q.rec = rec
	h.settleKey(ctx, q, leaseLost)
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
	if f == failResponseCutShort && c.stopCause() == stopMaxExecution {
		f = failMaxExecution // cut while the response's body arrived
	}
	p, detail, _ := problemFor(q, f, c.upstreamErr)
	if q.grpc {
		return grpcProblemRecord(p, detail, q.fp)
	}
	return problemRecord(p, detail, q.fp)
}

// attempt is the result of one try at settling a key.
type attempt uint8

const (
	settled attempt = iota // recorded, released, or lost to another owner
	retry                  // the store was unavailable
)

// settleKey records q.rec, or releases the key when there is none, until
// the key is settled. When
// the store is briefly unavailable it keeps trying in the background (the
// client already has its response) until the lease would have expired,
// after which the store settles the key on its own. A key held because the
// store is full (q.held) keeps its lease renewed meanwhile: a full store
// must never let a retry execute again.
func (h *Handler) settleKey(ctx context.Context, q *request, leaseLost bool) {
	if h.trySettle(ctx, q, leaseLost) == settled {
		h.settled(q)
		return
	}
	go h.settleLater(ctx, q, leaseLost)
}

// settled ends q's part in its key: local waiters wake, and the record's
// header, which the store has encoded, goes back to its pool.
func (h *Handler) settled(q *request) {
	h.owners.Remove(q.keyHash, q.done)
	h.settling.Add(-1)
	q.capture.freeHeader()
}

// trySettle records q.rec, or releases the key when there is none.
func (h *Handler) trySettle(ctx context.Context, q *request, leaseLost bool) attempt {
	if q.rec == nil {
		return h.tryRelease(ctx, q)
	}
	return h.tryComplete(ctx, q, leaseLost)
}

// settleLater keeps trying to settle q's key, in the background, for as
// long as its lease lives: the last try goes out just before it expires
// (lastTryBefore), because a store back in the lease's last second still
// takes the record, and a record the store does not take lets a retry
// execute the key again. A record's lease is renewed in its last third
// on the way (renewToRecord), so a store that answers again has the time
// to take the record — for one lock_ttl more at most (q.renewUntil).
func (h *Handler) settleLater(ctx context.Context, q *request, leaseLost bool) {
	defer h.settled(q)
	ttl := q.route.policy.LockTTL
	q.renewUntil = q.lease.End().Add(ttl)
	backoff := 50 * time.Millisecond
	for {
		wait := backoff
		if q.held {
			wait = min(wait, execution.RenewEvery(ttl))
		}
		left := q.lease.End().Sub(h.clock.Now()) - lastTryBefore(ttl)
		if left <= 0 {
			h.log.Warn(gaveUp(q), "route", q.route.label, "key_hash", q.keyHash)
			return
		}
		<-h.clock.After(min(wait, left))
		if wait >= left && q.rec != nil && !q.held {
			// The try due just before the lease ends goes first: a
			// renewal sent to a store that does not answer would hold it
			// until the store's timeout, past the lease's end.
			if h.trySettle(ctx, q, leaseLost) == settled {
				return
			}
			h.renewToRecord(ctx, q)
			continue
		}
		switch {
		case q.held:
			if h.renewHeld(ctx, q) {
				return // lost: another owner has the key
			}
		case q.rec != nil:
			h.renewToRecord(ctx, q)
		}
		if h.trySettle(ctx, q, leaseLost) == settled {
			return
		}
		backoff = min(2*backoff, time.Second)
	}
}

// gaveUp says how settling q's key ended when its lease ran out first.
func gaveUp(q *request) string {
	switch {
	case q.rec == nil:
		return "could not release key before its lease expired; it unlocks at lock_ttl"
	case q.unreplicated:
		// Not a lost record: it is there, with its ttl, while the master is.
		return "response recorded on the store's master, but fewer replicas than replica_ack acknowledged it before its lease expired; " +
			"retries replay it, unless the master fails before a replica has it: after such a failover a retry with its key executes again"
	}
	return "could not record response before its lease expired; a retry with its key will execute again"
}

// lastTryBefore is how long before a lease of ttl expires, as far as this
// process knows, settling tries for the last time: little enough that a
// store back in the lease's last moments still gets the try, enough that
// the try reaches it before the lease ends there. The lease's end is read
// from when Begin was sent, so the store's own end is later still.
func lastTryBefore(ttl time.Duration) time.Duration { return min(ttl/10, 100*time.Millisecond) }

// renewToRecord renews the lease of a key whose record is still to be
// written once the lease is in its last third, as a running lease is
// renewed: a store that answers again, but not yet the record, must not
// see the lease run out meanwhile. A failed renewal changes nothing: the
// try to record that follows says why, or finds the lease lost, or its
// own record written by a try whose reply was lost.
//
// Renewals stop at q.renewUntil, one lock_ttl past the lease's end when
// the call returned, and after the store refused the record
// (store.ErrRefused): a store that takes renewals but never the record (a
// trigger or privilege refusing it, a body whose write always times out)
// would otherwise keep its key answering 409, and its record in memory,
// for ever. One lock_ttl is the longest the operator lets a key stay
// locked for an owner that no longer answers; a store back within it
// still gets the record.
func (h *Handler) renewToRecord(ctx context.Context, q *request) {
	ttl := q.route.policy.LockTTL
	if q.refused || q.lease.End().Sub(h.clock.Now()) > execution.RenewEvery(ttl) {
		return
	}
	sent := h.clock.Now()
	d := min(ttl, q.renewUntil.Sub(sent))
	if !sent.Add(d).After(q.lease.End()) {
		return // at renewUntil already
	}
	if h.store.Extend(ctx, q.keyHash, q.token, d) == nil {
		q.lease.ExtendTo(sent.Add(d))
	}
}

// tryComplete stores q.rec. When the store has no room for it, it stores
// the record without its body instead; when there is no room for that
// either, it holds the key (q.held) so that no retry executes again, and
// the caller keeps trying.
func (h *Handler) tryComplete(ctx context.Context, q *request, leaseLost bool) attempt {
	ttl := q.route.policy.ttlFor(q.rec.Status)
	// The first try is timed from when the call returned: the clock was
	// read then, and little but the record's assembly lies between.
	start := q.returned
	if q.retried {
		start = h.clock.Now()
	}
	q.retried = true
	err := h.store.completeFrom(ctx, start, q.keyHash, q.token, q.rec, ttl)
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
		q.recordLost = true
		return settled
	case errors.Is(err, store.ErrFull):
		if !q.held {
			q.held = true
			h.log.Error("store full: no room to record a response, even without its body; the key stays locked (retries get 409) until the record fits",
				"route", q.route.label, "key_hash", q.keyHash, "error", err)
		}
		return retry
	}
	if errors.Is(err, store.ErrUnreplicated) {
		q.unreplicated = true
		h.log.Warn("response recorded on the store's master, not yet acknowledged by replica_ack replicas; writing it again until they do or its lease expires",
			"route", q.route.label, "key_hash", q.keyHash, "error", err)
		return retry
	}
	if errors.Is(err, store.ErrRefused) {
		q.refused = true
	}
	h.warnRetry(q, "could not record response yet; retrying until its lease expires", err)
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
	h.warnRetry(q, "could not release key yet; retrying until its lease expires", err)
	return retry
}

// warnRetry logs a failed try at settling q's key, the first time only:
// a store that keeps failing is said once, then by how settling ended
// (gaveUp), not once a second for the whole lease.
func (h *Handler) warnRetry(q *request, msg string, err error) {
	if q.warnedRetry {
		return
	}
	q.warnedRetry = true
	h.log.Warn(msg, "route", q.route.label, "key_hash", q.keyHash, "error", err)
}
