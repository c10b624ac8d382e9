package proxy

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution"
)

// A client stops waiting for its upstream call in two ways: upstream.timeout
// passes, or the client disconnects. Either way the call is detached: it
// goes on in its own goroutine, its lease renewed, until it answers or
// upstream.max_execution passes, and its answer is recorded as usual, so
// that retries get 409 in-flight while it runs and the recorded answer
// after — one execution (docs/request-handling.md). A client whose timeout
// passed is answered 504 upstream-timeout; one that left gets nothing.
//
// Detached calls are bounded, in count (upstream.max_detached) and in the
// memory they may hold (upstream.max_detached_bytes: each counts its
// request body and its route's max_response_body, the most its record can
// take). A call that finds no room stays with its client and is cancelled
// when upstream.timeout passes, as if max_execution were upstream.timeout:
// on_upstream_error decides. That is counted in
// idempotency_proxy_detach_refused_total and logged. A detached call whose
// outcome turns unknown hands its room to the settlement that asks the
// upstream (reconcile.go), so its key is counted once.

// letGo detaches q's call from its client, and answers the client 504 when
// its timeout passed, and reports whether it did. It does not when the call
// has just returned (the client gets its answer), nor when detached calls
// are at their bound: then a call whose timeout passed is cancelled.
func (h *Handler) letGo(w http.ResponseWriter, q *request, timedOut bool) bool {
	q.reserved = detachedRoom(q)
	if !h.detachable.Take(q.reserved) {
		h.metrics.detachRefused.Inc()
		h.log.Warn("too many upstream calls detached from their clients (upstream.max_detached, upstream.max_detached_bytes): this one ends at upstream.timeout",
			"route", q.route.label, "key_hash", q.keyHash, "client_gone", !timedOut)
		if timedOut {
			q.capture.stop.CompareAndSwap(uint32(stopNone), uint32(stopTimeout))
			q.call.Cancel(execution.CutAtWait)
		}
		return false
	}
	// Nobody to answer a client that left: the request is reported when
	// its call ends. Set before detach, which publishes it to the call.
	q.reportLater = !timedOut
	ok, status := q.capture.detach(h.metrics.detached)
	if !ok {
		q.reportLater = false
		h.detachable.Give(q.reserved)
		return false
	}
	if !timedOut {
		return true
	}
	if status != 0 {
		// The status and part of the body went out: the client's response
		// can only be cut. Its retry gets the whole recorded answer.
		q.outcome, q.status = OutcomeUpstreamTimeout, status
		panic(http.ErrAbortHandler)
	}
	h.refuse(w, q, failClientTimeout, nil)
	return true
}

// detachedRoom is the room a detached call of q holds among the detached
// ones: its body, and its answer, bounded by max_response_body as a record
// is. The settlement of its unknown outcome holds the same: the body, to
// resend, and a found answer.
func detachedRoom(q *request) int64 {
	return int64(len(q.body)) + q.route.policy.MaxResponseBody
}

// q's deadline bounds its call (execution.Call).
var _ execution.Bounded = (*request)(nil)

// DeadlinePassed notes on q's capture why its deadline cancels the call,
// unless it was cancelled already.
func (q *request) DeadlinePassed(cut execution.Cut) {
	cause := stopMaxExecution
	if cut == execution.CutAtWait {
		cause = stopTimeout
	}
	q.capture.stop.CompareAndSwap(uint32(stopNone), uint32(cause))
}

// detachedEnded reports the end of a call its client had left, and gives
// back its room, unless the settlement of its unknown outcome kept it
// (startReconcile).
func (h *Handler) detachedEnded(q *request) {
	if !q.roomKept {
		h.detachable.Give(q.reserved)
	}
	q.route.metrics.detached[q.ran.outcome].Inc()
	d := time.Since(q.start)
	h.log.LogAttrs(q.in.Context(), slog.LevelInfo, "detached upstream call ended",
		slog.String("route", q.route.label), slog.String("outcome", string(q.ran.outcome)),
		slog.Int("status", q.ran.status), slog.Float64("duration_seconds", d.Seconds()),
		slog.String("key_hash", q.keyHash))
	if q.reportLater {
		h.report(q, q.ran.outcome, q.ran.status)
	}
}
