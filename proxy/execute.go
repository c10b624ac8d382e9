package proxy

import (
	"cmp"
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
// (await; letting the client go, detach.go).
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
	ctx, cancel := context.WithCancelCause(detached)
	q.call = execution.Call{Wait: h.wait(q), MaxExecution: h.maxExecution, LockTTL: q.route.policy.LockTTL, Cancel: cancel}
	h.startCapture(&q.capture, w, q)
	q.done = h.owners.Add(q.keyHash, cancel)
	if h.aborted.Load() {
		cancel(nil)
	}
	q.detached = detached
	q.startLease()
	q.call.Start(h.clock, q)

	q.upstream = q.in.WithContext(httptrace.WithClientTrace(ctx, &q.capture.hooks))
	setBody(q.upstream, q.body, &q.bodyReader)
}

// wait is how long q's client waits for the upstream's answer:
// upstream.timeout, or a gRPC client's own grpc-timeout when shorter.
func (h *Handler) wait(q *request) time.Duration {
	if q.grpcWait > 0 {
		return min(q.grpcWait, h.upstreamTimeout)
	}
	return h.upstreamTimeout
}

// startLease notes q's lease, which runs from when Begin was sent, and
// the key its settling records or releases (execution.Settling).
func (q *request) startLease() {
	ttl := q.route.policy.LockTTL
	q.lease.Start(q.began, ttl)
	q.settle = execution.Settling{Key: q.keyHash, Token: q.token, Route: q.route.label, LockTTL: ttl, Lease: &q.lease}
}

// startCapture readies c to capture the answer to q for w: all the
// capture knows of q's route is the policy and whether it reconciles. Its
// trace, c.hooks, notes when the request reaches the upstream.
func (h *Handler) startCapture(c *capture, w http.ResponseWriter, q *request) {
	*c = capture{rw: w, hdr: newHeader(), aborted: &h.aborted, limit: q.route.policy.MaxResponseBody,
		policy: &q.route.policy, reconciles: q.route.reconciles(), keyHash: q.keyHash, head: q.in.Method == http.MethodHead, grpc: q.grpc}
	c.hooks = httptrace.ClientTrace{WroteHeaders: c.requestSent}
}

// await waits for q's upstream call as long as its client does
// (execution.Call): the call's outcome is answered, or the client let go.
func (h *Handler) await(w http.ResponseWriter, q *request) {
	gone := q.in.Context().Done()
	for {
		switch q.call.Await(gone) {
		case execution.CallEnded:
			h.answered(w, q)
			return
		case execution.WaitPassed:
			if q.grpc && q.capture.begun() {
				// A gRPC answer under way stays with its client: a server
				// stream, which looks unary until its second message,
				// would be cut, and a client that stops waiting resets
				// the call (ClientLeft). max_execution still bounds it.
				continue
			}
			if h.letGo(w, q, true) {
				return
			}
		case execution.ClientLeft:
			gone = nil
			if h.letGo(w, q, false) {
				return
			}
		}
	}
}

// answered takes the outcome of q's call, which ran with its client
// attached, and aborts the client's response as the reverse proxy did.
func (h *Handler) answered(w http.ResponseWriter, q *request) {
	q.outcome, q.status = q.ran.outcome, q.ran.status
	if q.recon != nil && q.recon.client {
		h.awaitSettlement(w, q) // nothing went to the client yet
		return
	}
	if q.ran.aborted {
		panic(http.ErrAbortHandler)
	}
}

// call makes the upstream call of q (q.upstream) and settles its key. It
// runs in a goroutine of its own (callers): a panic of the reverse proxy
// (http.ErrAbortHandler, a response cut short) is caught here and passed
// on to the client's goroutine, which aborts the client's response with it.
func (h *Handler) call(q *request) {
	ctx := q.detached
	start := h.clock.Now()
	aborted := h.serveUpstream(q, q.upstream)
	q.call.Returned()
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
	q.call.End()
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
				return
			}
			h.cutWhileAnswering(q, out)
		}
	}()
	h.rp.ServeHTTP(&q.capture, out)
	return false
}

// cutWhileAnswering logs the call of q that its deadline cut while the
// upstream's answer arrived, when that is why the reverse proxy aborted
// it: as upstreamError logs a call cut before the answer, with the Cut
// for error. The reverse proxy's own line of it is left out
// (cutsLoggedApart).
func (h *Handler) cutWhileAnswering(q *request, out *http.Request) {
	var cut execution.Cut
	if q.capture.upstreamErr != nil || !errors.As(context.Cause(out.Context()), &cut) {
		return
	}
	h.log.Warn("upstream request failed", "method", out.Method, "path", out.URL.Path, "key_hash", q.keyHash,
		"request_sent", q.capture.sent.Load(), "error", cut)
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
	// note is what the client would have been told of a released key
	// whose call ran detached from it (asyncreleased.go).
	var note *store.Record
	outcome := OutcomeUpstreamError
	f, lost := c.verdict(aborted)
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
		if h.notesRelease(q) {
			note = h.problemRecord(q, f)
		}
	case f == failResponseTooLarge, f == failResponseNotHTTP:
		// The upstream answered, so it executed the request; its answer
		// is too large to read, or not HTTP. A retry would execute again
		// and fail the same way: the 502 is kept whatever
		// on_upstream_error says.
		rec = h.problemRecord(q, f)
	case f != 0 || lost || c.ambiguous && (c.withheld || pol.OnUpstreamError == UpstreamErrorKeep):
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
		} else if h.notesRelease(q) {
			note = h.problemRecord(q, cmp.Or(f, failResponseCutShort))
		}
	case !c.recording:
		// A release status: "not processed, try again".
		outcome = OutcomeReleased
		if h.notesRelease(q) && !c.noStore {
			note = c.releasedAnswer(q.fp)
		}
	case q.grpc && grpcReleased(q, &outcome):
	case q.graphql == graphqlPersisted && graphqlReleased(q, &outcome):
	default:
		// The upstream answered whole (f == 0, !lost), with a status
		// to record (c.recording).
		outcome = OutcomeExecuted
		rec = c.record(q.fp)
		if rec.BodyOmitted {
			q.settle.OmitReason = omitTooLarge
		}
	}

	if rec != nil {
		rec.Request, rec.Lookup = q.desc, q.lookup()
		if pol.ExpiredKeys == ExpiredReject {
			rec.Tombstone = pol.ExpiredKeyWindow
		}
		q.settle.Rec, q.settle.TTL, q.settle.From = rec, pol.ttlFor(rec.Status), q.returned
	} else if note != nil && h.notesBeforeRelease(ctx, q) {
		h.noteReleased(ctx, q, note)
	} else if note != nil {
		q.lateNote = note // for noteAfterRelease
	}
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

// settleKey records q's record, or releases the key when there is none,
// until the key is settled (execution.Settling): when the store is
// briefly unavailable it keeps trying in the background, the client
// already answered, until the lease would have expired.
//
// The marker written before the request was sent (markPending) goes once
// the outcome is known: after the record (dropPending), before the release
// while the key is proven held (dropPendingHeld). A lost lease leaves it
// to the key's other owner.
func (h *Handler) settleKey(ctx context.Context, q *request, leaseLost bool) {
	if q.settle.Rec == nil && !leaseLost {
		h.dropPendingHeld(ctx, q)
	}
	if q.settle.Try(ctx, &h.settler, leaseLost) {
		h.recorded(ctx, q, leaseLost)
		h.noteAfterRelease(ctx, q)
		h.settled(q)
		return
	}
	go h.settleLater(ctx, q, leaseLost)
}

// noteAfterRelease reads the status URL's mark once more when q's key is
// released with its note left for later (notesBeforeRelease): a retry
// marked after the first read was given its status URL only if the key was
// still held after its mark (markStatusURLGiven), so this read finds it.
// Its client polls after the 202's Retry-After.
func (h *Handler) noteAfterRelease(ctx context.Context, q *request) {
	late := q.lateNote
	if late == nil {
		return
	}
	q.lateNote = nil
	if q.settle.Rec == nil && h.statusURLGiven(ctx, q) {
		h.noteReleased(ctx, q, late)
	}
}

// settleLater settles q's key in the background (execution.Settling.Later).
func (h *Handler) settleLater(ctx context.Context, q *request, leaseLost bool) {
	defer h.settled(q)
	if q.settle.Later(ctx, &h.settler, leaseLost) {
		h.recorded(ctx, q, leaseLost)
		h.noteAfterRelease(ctx, q)
	}
}

// recorded drops q's pending marker once the store took its record.
func (h *Handler) recorded(ctx context.Context, q *request, leaseLost bool) {
	if q.settle.Rec != nil && !leaseLost && !q.settle.RecordLost {
		h.dropPending(ctx, q)
	}
}

// settled ends q's part in its key: local waiters wake, and the record's
// header, which the store has encoded, goes back to its pool.
func (h *Handler) settled(q *request) {
	h.owners.Remove(q.keyHash, q.done)
	h.settling.Add(-1)
	q.capture.freeHeader()
}
