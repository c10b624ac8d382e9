package proxy

import (
	"net/http"

	"github.com/idempotency-proxy/idempotency-proxy/internal/problemjson"
)

// ProblemBase prefixes the type URI of every problem the proxy answers
// itself, so a client can tell the proxy's 422 from its upstream's.
const ProblemBase = "https://idempotency-proxy.dev/problems/"

// problem is one kind of error response (RFC 9457).
type problem struct {
	Type   string
	Title  string
	Status int
	// RetryAfter, in seconds, is sent as Retry-After when positive.
	RetryAfter int
}

var (
	probMissingKey    = problem{ProblemBase + "missing-key", "Idempotency key required", http.StatusBadRequest, 0}
	probInvalidKey    = problem{ProblemBase + "invalid-key", "Invalid idempotency key", http.StatusBadRequest, 0}
	probBadBody       = problem{ProblemBase + "body-unreadable", "Request body could not be read", http.StatusBadRequest, 0}
	probAmbiguousBody = problem{ProblemBase + "ambiguous-body", "Request body can be read more than one way", http.StatusBadRequest, 0}
	probTooLarge      = problem{ProblemBase + "body-too-large", "Request body too large", http.StatusRequestEntityTooLarge, 0}
	probInFlight      = problem{ProblemBase + "in-flight", "Request with this idempotency key is in progress", http.StatusConflict, 1}
	probMismatch      = problem{ProblemBase + "payload-mismatch", "Idempotency key reused with a different request", http.StatusUnprocessableEntity, 0}
	probStore         = problem{ProblemBase + "store-unavailable", "Idempotency store unavailable", http.StatusServiceUnavailable, 2}
	probStoreFull     = problem{ProblemBase + "store-full", "Idempotency store full", http.StatusServiceUnavailable, 5}
	probUnreadable    = problem{ProblemBase + "record-unreadable", "Recorded response unreadable", http.StatusServiceUnavailable, 0}
	probUnreachable   = problem{ProblemBase + "upstream-unreachable", "Upstream unreachable", http.StatusBadGateway, 0}
	probUpstreamError = problem{ProblemBase + "upstream-failed", "Upstream failed after the request was sent", http.StatusBadGateway, 0}
	probAmbiguousPath = problem{ProblemBase + "ambiguous-path", "Request target can be read two ways", http.StatusBadRequest, 0}
	// The method-override headers name more than one method.
	probAmbiguousMethod = problem{ProblemBase + "ambiguous-method", "Request method can be read two ways", http.StatusBadRequest, 0}
	probKeyExpired      = problem{ProblemBase + "key-expired", "Idempotency key expired", http.StatusGone, 0}
	// The request goes on: a retry after a second gets 409 or its answer.
	probUpstreamTimeout = problem{ProblemBase + "upstream-timeout", "Upstream did not answer in time; the request is still running", http.StatusGatewayTimeout, 1}
	// An unknown, expired or foreign status URL (async.go).
	probStatusUnknown = problem{ProblemBase + "status-unknown", "No such request status", http.StatusNotFound, 0}
	probStatusMethod  = problem{ProblemBase + "status-method", "A status URL answers GET and HEAD only", http.StatusMethodNotAllowed, 0}
)

// problemTypes is every problem the proxy answers. clients/contract.json
// decides what a client does with each; TestEveryProblemTypeHasAClientDecision
// fails when the two disagree, or when a problem is missing here.
var problemTypes = []problem{
	probMissingKey, probInvalidKey, probBadBody, probAmbiguousBody, probTooLarge, probInFlight, probMismatch,
	probStore, probStoreFull, probUnreadable, probUnreachable, probUpstreamError, probAmbiguousPath,
	probAmbiguousMethod, probUpstreamTimeout, probKeyExpired, probStatusUnknown, probStatusMethod,
}

// body is p's problem+json body with detail.
func (p problem) body(detail string) problemjson.Body {
	return problemjson.Body{Type: p.Type, Title: p.Title, Status: p.Status, Detail: detail}
}

// problemJSON is the application/problem+json body of p.
func problemJSON(p problem, detail string) []byte { return p.body(detail).Marshal() }

// writeProblem answers with an application/problem+json body.
func writeProblem(w http.ResponseWriter, p problem, detail string) {
	problemjson.Write(w, p.body(detail), p.RetryAfter)
}
