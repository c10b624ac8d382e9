package proxy

import (
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/grpcwire"
)

// A gRPC call (docs/request-handling.md, "gRPC") is a POST to
// /package.Service/Method over HTTP/2 with Content-Type application/grpc.
// A unary call on a protected route is handled like any request: its key
// from the route's key sources (the idempotency-key metadata is the
// Idempotency-Key header), its fingerprint over the method path and the
// message's bytes, its answer recorded with its trailers and replayed as
// it came. What differs is said here: how a unary call is told from a
// stream, the answers that release the key, the client's grpc-timeout,
// and refusals as gRPC statuses (failure_grpc.go).

// grpcEndWait is how long the proxy waits, after a call's first message,
// for the end of its request stream, which a unary call sends with the
// message: a call whose stream is still open then is a stream
// (grpcwire.ReadFirst). Only a streaming call that waits for the server
// after its first message waits this long, once.
const grpcEndWait = 100 * time.Millisecond

// isGRPC reports whether r is a gRPC call. gRPC runs over HTTP/2 only, so
// an HTTP/1.1 request pays one comparison.
func isGRPC(r *http.Request) bool {
	if r.ProtoMajor != 2 {
		return false
	}
	ct := r.Header["Content-Type"]
	return len(ct) == 1 && grpcwire.IsGRPC(ct[0])
}

// grpcWait is a gRPC call's grpc-timeout, 0 when it sent none.
func grpcWait(r *http.Request) time.Duration {
	if d, ok := grpcwire.Timeout(headerValue(r.Header, grpcwire.TimeoutField)); ok && d > 0 {
		return d
	}
	return 0
}

// readGRPC is the step of identify for a gRPC call on a protected route,
// before its key is read: a call without a key on a route that does not
// require one is forwarded as it comes; otherwise its first message is
// read, bounded by max_request_body. A unary call goes on: readGRPC returns
// its message, as sent, and true, with form, the message the fingerprint
// hashes in its place when it came compressed with gzip: the message as it
// reads uncompressed (grpcwire.Decompressed), so that a retry compressed
// otherwise, or not at all, is the same call. A stream is forwarded
// unprotected (counted as passthrough), or refused UNIMPLEMENTED where the
// route requires a key.
func (h *Handler) readGRPC(w http.ResponseWriter, q *request) (msg, form []byte, ok bool) {
	r, pol := q.in, &q.route.policy
	if _, _, err := requestKeyFrom(r, q.route.sources, nil, false); err == errNoKey && !pol.RequireKey {
		q.outcome = OutcomeNoKey
		h.passThrough(q.unrecorded(w), q, r)
		dropControlTrailers(w.Header(), pol.UpstreamControlHeader)
		return nil, nil, false
	}
	first, err := grpcwire.ReadFirst(r.Body, pol.MaxRequestBody, grpcEndWait)
	if first.Body != nil {
		r.Body = first.Body // forwarded as it came when not unary or refused in shadow mode
	}
	switch {
	case errors.Is(err, grpcwire.ErrTooLarge):
		h.refuse(w, q, failBodyTooLarge, tooLarge(pol.MaxRequestBody))
		return nil, nil, false
	case err != nil:
		h.refuse(w, q, failBodyUnreadable, err)
		return nil, nil, false
	case !first.Unary && pol.RequireKey:
		h.refuse(w, q, failStreamingCall, nil)
		return nil, nil, false
	case !first.Unary:
		// Forwarded as on a protected route without a key: the control
		// header is the proxy's still.
		q.outcome = OutcomePassthrough
		h.passThrough(q.unrecorded(w), q, r)
		dropControlTrailers(w.Header(), pol.UpstreamControlHeader)
		return nil, nil, false
	}
	// The client's deadline is its wait, not the call's: passed on, it
	// would cut the call upstream when the client gives up, leaving an
	// outcome nobody records. The call is bounded by upstream.max_execution,
	// as every executed request is.
	delete(r.Header, grpcwire.TimeoutField)
	form = grpcwire.Decompressed(first.Message, headerValue(r.Header, grpcwire.EncodingField), pol.MaxRequestBody)
	return first.Message, form, true
}

func headerValue(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// grpcReleased reports whether the answer to gRPC call q is not one to
// record: a status in release_grpc_statuses ("not processed", as
// release_statuses for HTTP), or more than one response message, which
// only a server-streaming call sends — its request looked unary, but a
// stream is not protected: it went to its client as it came, and its key
// is released (counted as passthrough), whether or not it fitted in
// max_response_body.
// When it is, it sets *outcome.
func grpcReleased(q *request, outcome *Outcome) bool {
	c := &q.capture
	if code, ok := grpcwire.Status(c.header, c.trailers()); ok && slices.Contains(q.route.policy.ReleaseGRPCStatuses, code) {
		*outcome = OutcomeReleased
		return true
	}
	if c.messages.Messages() > 1 {
		*outcome = OutcomePassthrough
		return true
	}
	return false
}
