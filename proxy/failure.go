package proxy

import (
	"context"
	"errors"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/problemjson"
)

// failure is a reason the proxy answers a request itself instead of the
// upstream.
type failure uint8

const (
	failMissingKey failure = iota + 1
	failInvalidKey
	failBodyTooLarge
	failBodyUnreadable
	failAmbiguousBody // JSON the proxy reads repeats a member name
	failMismatch
	failInFlight
	failWaitedTooLong
	failStoreUnavailable
	failStoreFull
	failRecordUnreadable // a record is stored under the key that cannot be read
	failUnreachable      // nothing reached the upstream
	failUpstream         // the connection failed after the request was sent
	failUpstreamTimeout  // no answer within upstream.timeout, and the call was cancelled
	failClientTimeout    // no answer within upstream.timeout, and the call goes on detached
	failMaxExecution     // no answer within upstream.max_execution
	failShuttingDown     // shutdown_timeout passed before the upstream answered
	failResponseTooLarge // the upstream's response headers were over the transport's limit
	failResponseNotHTTP  // the upstream answered with an HTTP/1.x response the transport cannot read
	failResponseCutShort // recorded under on_upstream_error: keep after a cut-short body
	failAmbiguousPath    // a protected request's path can be read two ways
	failAmbiguousMethod  // its method-override headers name more than one method
	failKeyExpired       // the key's record expired, and the route rejects expired keys
	failProbeHole        // the route's reconcile lookup needs what the request lacks
	failInFlightSettling // in flight: its unknown outcome is being settled
	failSettling         // the first caller's wait for a settlement ran out
	failSettledAbsent    // the lookup says it did not happen: the key is released
	failAmbiguousGraphQL // a GraphQL request can be read two ways, one a mutation
	failMutationOverGET  // a GraphQL mutation sent with GET
	failStreamingCall    // a streaming gRPC call on a route that requires a key
)

// problemFor maps a failure to the problem response the client gets and
// the outcome it is counted as: with failureProblem, the one place that
// does. q gives the details (route policy, method, path) of the failures
// that name them; err is the failure's cause, if any.
func problemFor(q *request, f failure, err error) (problem, string, Outcome) {
	switch f {
	case failMissingKey:
		return probMissingKey, "This route requires " + describeKeySources(q.route.sources) + " on " + q.in.Method + " requests.", OutcomeMissingKey
	case failWaitedTooLong:
		return probInFlight, "A request with this idempotency key" + runningSince(q) + " was still being processed after waiting " +
			q.route.policy.WaitTimeout.String() + ". Retry later.", OutcomeConflict
	case failInFlightSettling:
		return probInFlight, "A request with this idempotency key" + runningSince(q) + " reached the upstream, whose answer was lost; its outcome is being settled by asking the upstream. Retry after a few seconds to get the settled answer.", OutcomeConflict
	case failInFlight:
		return probInFlight, "A request with this idempotency key" + runningSince(q) + " is still being processed. Retry after it completes.", OutcomeConflict
	case failKeyExpired:
		return probKeyExpired, "This idempotency key's recorded response expired at " + q.expiredAt.UTC().Format(time.RFC3339) +
			", so the request was not forwarded: a retry this late is refused rather than executed again. Use a new key for a new operation.", OutcomeExpiredKey
	case failAmbiguousPath:
		return probAmbiguousPath, "The request path " + strconv.Quote(q.target.escaped) + " can be read two ways: it holds an encoded slash or backslash (%2F, %5C), a backslash, a \";\" path parameter (%3B too), a segment ending in encoded whitespace (%20), or dot segments that resolve differently with and without merging slashes, which upstreams read differently. Send the path in one plain form.", OutcomeAmbiguous
	}
	return failureProblem(f, err)
}

// failureProblem is problemFor of the failures whose answer needs no
// request: those of the upstream exchange, which the reverse proxy's
// error handler reports without one, and the rest.
func failureProblem(f failure, err error) (problem, string, Outcome) {
	switch f {
	case failInvalidKey:
		return probInvalidKey, err.Error() + ".", OutcomeInvalidKey
	case failBodyTooLarge:
		return probTooLarge, err.Error(), OutcomeTooLarge
	case failBodyUnreadable:
		return probBadBody, "The request body could not be read.", OutcomeBadRequest
	case failAmbiguousBody:
		return probAmbiguousBody, "The JSON request body can be read more than one way: " + err.Error() + ". Send each member name once.", OutcomeAmbiguous
	case failMismatch:
		return probMismatch, "This idempotency key was first used with a different request (method, host, path, query, headers, body or trailers). Use a new key for a new operation.", OutcomeMismatch
	case failStoreUnavailable:
		return probStore, "The idempotency store is unavailable, so the request was not forwarded. It is safe to retry with the same key.", OutcomeStoreRejected
	case failStoreFull:
		return probStoreFull, "The idempotency store is full and cannot take new keys, so the request was not forwarded. It is safe to retry with the same key once records expire or the store is enlarged.", OutcomeStoreRejected
	case failRecordUnreadable:
		return probUnreadable, "A response is recorded under this idempotency key, but the proxy cannot read it, so the request was not forwarded again. Retrying with this key gets the same answer until an operator restores the record's encryption key or deletes the key.", OutcomeUnreadable
	case failUnreachable:
		return probUnreachable, "The upstream could not be reached; the request was not sent. It is safe to retry with the same key.", OutcomeUpstreamError
	case failUpstreamTimeout:
		return probUpstreamError, "The upstream did not answer within the upstream timeout; the outcome of the request is unknown.", OutcomeUpstreamError
	case failClientTimeout:
		return probUpstreamTimeout, "The upstream did not answer within the upstream timeout. The request is still running: retry with the same key to get its response once it is recorded (409 in-flight until then).", OutcomeUpstreamTimeout
	case failMaxExecution:
		return probUpstreamError, "The upstream did not answer within the longest time a request may run (upstream.max_execution); the outcome of the request is unknown.", OutcomeUpstreamError
	case failShuttingDown:
		return probUpstreamError, "The proxy was shutting down before the upstream answered; the outcome of the request is unknown. Its key stays locked until its lease expires (lock_ttl): a retry with the same key before then gets 409 in-flight.", OutcomeUpstreamError
	case failResponseTooLarge:
		return probUpstreamError, "The upstream answered, but its response headers are larger than the proxy accepts; the request was executed and its response cannot be delivered.", OutcomeUpstreamError
	case failResponseNotHTTP:
		return probUpstreamError, "The upstream answered, but its response is not valid HTTP (a malformed status line or header field, or conflicting lengths); the request was executed and its response cannot be delivered.", OutcomeUpstreamError
	case failAmbiguousMethod:
		return probAmbiguousMethod, "The method-override headers (X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override) name more than one method (two headers, a list or repeated lines), or something that is not a method, and upstreams pick different ones. Send one header naming one method.", OutcomeAmbiguous
	case failProbeHole:
		return probMissingKey, "This route settles lost answers by asking the upstream, and " + err.Error() + ". Send it, or use a route without reconcile.", OutcomeMissingKey
	case failSettling:
		return probUpstreamError, "The connection to the upstream failed after the request was sent, and its outcome is being settled by asking the upstream. Retry with the same key to get the settled answer (409 in-flight until then); it is never executed twice.", OutcomeUpstreamError
	case failSettledAbsent:
		return probUpstreamError, "The connection to the upstream failed after the request was sent, and the upstream says it did not take effect (or its outcome could not be settled and the route releases such keys): the key is released, and a retry with it executes the request.", OutcomeUpstreamError
	case failAmbiguousGraphQL:
		return probAmbiguousBody, "The GraphQL request can be read more than one way: " + err.Error() + ". Send one mutation per request, named by its operationName if named.", OutcomeAmbiguous
	case failMutationOverGET:
		return probAmbiguousMethod, "A GraphQL mutation was sent with GET, which GraphQL over HTTP forbids: a server that runs it anyway would run it without idempotency protection. Send it with POST.", OutcomeAmbiguous
	case failResponseCutShort:
		return probUpstreamError, "The upstream response was cut short; the outcome of the request is unknown.", OutcomeUpstreamError
	case failStreamingCall:
		return probStreamingCall, "This route requires an idempotency key, and a streaming call has no one answer to record: only unary calls are protected. Make the call unary, or route it where no key is required.", OutcomeMissingKey
	}
	return probUpstreamError, "The connection to the upstream failed after the request was sent; its outcome is unknown.", OutcomeUpstreamError
}

// refuse answers q with the problem response of f.
// A shadow route forwards the request instead, and counts what it would
// have answered.
func (h *Handler) refuse(w http.ResponseWriter, q *request, f failure, err error) {
	if would, ok := shadowWould(f, &q.route.policy); ok && q.route.policy.Mode == ModeShadow {
		h.shadow(w, q, would)
		return
	}
	p, detail, outcome := problemFor(q, f, err)
	q.outcome, q.status = outcome, p.Status
	if q.grpc {
		writeGRPCProblem(w, p, detail)
		return
	}
	b := p.Body(detail)
	if p == probInFlight && !q.heldSince.IsZero() {
		b.StartedAt = q.heldSince.UTC().Format(startedAtFormat)
	}
	if q.graphql != graphqlNone {
		q.status = problemjson.WriteGraphQL(w, q.in.Header.Get("Accept"), b, p.RetryAfter)
		return
	}
	problemjson.Write(w, b, p.RetryAfter)
}

// startedAtFormat is RFC 3339 with the milliseconds a lease keeps.
const startedAtFormat = "2006-01-02T15:04:05.000Z07:00"

// runningSince is the part of an in-flight problem's detail that says
// since when the request holding the key has been running, when its lease
// says.
func runningSince(q *request) string {
	if q.heldSince.IsZero() {
		return ""
	}
	return ", running since " + q.heldSince.UTC().Format(startedAtFormat) + ","
}

// stopCause is why the proxy cancelled an upstream call.
type stopCause uint32

const (
	stopNone         stopCause = iota
	stopTimeout                // upstream.timeout passed and the call could not go on detached
	stopMaxExecution           // upstream.max_execution passed
	stopShutdown               // shutdown_timeout passed (Abort)
)

// upstreamFailure classifies an error of the upstream exchange. sent says
// whether the request's headers reached an upstream connection: until
// then the upstream cannot have acted on it. stop is why the proxy
// cancelled the call, if it did.
func upstreamFailure(err error, sent bool, stop stopCause) failure {
	switch {
	case stop == stopShutdown:
		return failShuttingDown
	case !sent:
		return failUnreachable
	case stop == stopMaxExecution:
		return failMaxExecution
	case stop == stopTimeout, errors.Is(err, context.DeadlineExceeded):
		return failUpstreamTimeout
	case responseHeaderTooLarge(err):
		return failResponseTooLarge
	case responseMalformed(err):
		return failResponseNotHTTP
	}
	return failUpstream
}

// responseHeaderTooLarge reports whether the transport refused the
// upstream's response because its header section exceeded
// MaxResponseHeaderBytes, over HTTP/1.x or, as the header list size its
// SETTINGS advertised, over HTTP/2. net/http has no sentinel for it, only
// these messages; TestResponseHeaderOverTransportLimitIsNotExecutedTwice
// and TestHTTP2AnswerOverTheHeaderLimitIsNotExecutedTwice fail if one
// changes.
func responseHeaderTooLarge(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "server response headers exceeded") ||
		strings.Contains(msg, "response header list larger than advertised limit")
}

// malformedResponse is what net/http's HTTP/1.x transport says of an
// answer whose status line it read as HTTP/1.x and that it cannot parse,
// beside the textproto.ProtocolError of a malformed header line: a status
// code, a length or a transfer coding it refuses. It has no sentinels for
// them, only these messages; TestMalformedAnswerIsNotExecutedTwice fails
// if one changes. An answer with no HTTP/1.x status line at all ("malformed
// HTTP response", "malformed HTTP version") is not in it: a peer that does
// not speak HTTP, as a misrouted upstream address, executed nothing.
//
// Its HTTP/2 transport says the rest, in the PROTOCOL_ERROR stream error
// it ends the request's stream with when the HEADERS the upstream answered
// on it cannot be read: no status or one that is not a number, a field
// name or value HTTP/2 forbids, pseudo-header fields out of place. The
// upstream answered on the request's own stream, so it executed it;
// TestMalformedHTTP2AnswerIsNotExecutedTwice fails if one changes.
var malformedResponse = [...]string{
	"malformed HTTP status code",
	"multiple Content-Length headers",
	"bad Content-Length",
	"unsupported transfer encoding",
	"malformed response from server",
	"invalid header field name",
	"invalid header field value",
	"pseudo header field after regular",
	"invalid pseudo-header",
	"duplicate pseudo-header",
	"mix of request and response pseudo headers",
}

// responseMalformed reports whether the transport refused the upstream's
// answer, begun as HTTP/1.x, as malformed. The upstream answered, so it
// executed the request, and a retry would be answered the same way.
func responseMalformed(err error) bool {
	var pe textproto.ProtocolError
	if errors.As(err, &pe) {
		return true
	}
	msg := err.Error()
	for _, m := range malformedResponse {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// upstreamFailed is implemented by the ResponseWriter of an executed
// request (capture): the reverse proxy's error handler tells it the
// upstream exchange failed, and learns whether the request had been sent
// and the key_hash it executes.
type upstreamFailed interface {
	upstreamFailed(err error) (f failure, sent bool, keyHash string)
}

var _ upstreamFailed = (*capture)(nil)

// upstreamError is the reverse proxy's one error path. An executed
// request's capture learns of the error, so that its key is settled by
// what the failure means; the client gets a 502 either way.
func (h *Handler) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	var f failure
	var sent bool
	var keyHash string
	if c, ok := w.(upstreamFailed); ok {
		f, sent, keyHash = c.upstreamFailed(err)
	} else {
		// Pass-through requests carry no trace: only a failed dial proves
		// nothing was sent.
		sent = !isDialError(err)
		f = upstreamFailure(err, sent, stopNone)
	}
	p, detail, _ := failureProblem(f, err)
	h.log.Warn("upstream request failed", "method", r.Method, "path", r.URL.Path, "key_hash", keyHash, "request_sent", sent, "error", err)
	if isGRPC(r) {
		writeGRPCProblem(w, p, detail)
		return
	}
	if c, ok := w.(*capture); ok && c.policy.GraphQL {
		// An executed request on a GraphQL route: its client, and the
		// retries its record answers under keep, read GraphQL.
		problemjson.WriteGraphQL(w, r.Header.Get("Accept"), p.Body(detail), p.RetryAfter)
		return
	}
	writeProblem(w, p, detail)
}
