package proxy

import (
	"net/http"

	"github.com/idempotency-proxy/idempotency-proxy/internal/problemjson"
)

// problem is one kind of error response (RFC 9457); its type URI is
// problemjson.Base and its name.
type problem = problemjson.Problem

var (
	probMissingKey    = problem{Type: problemjson.Base + "missing-key", Title: "Idempotency key required", Status: http.StatusBadRequest}
	probInvalidKey    = problem{Type: problemjson.Base + "invalid-key", Title: "Invalid idempotency key", Status: http.StatusBadRequest}
	probBadBody       = problem{Type: problemjson.Base + "body-unreadable", Title: "Request body could not be read", Status: http.StatusBadRequest}
	probAmbiguousBody = problem{Type: problemjson.Base + "ambiguous-body", Title: "Request body can be read more than one way", Status: http.StatusBadRequest}
	probTooLarge      = problem{Type: problemjson.Base + "body-too-large", Title: "Request body too large", Status: http.StatusRequestEntityTooLarge}
	probInFlight      = problem{Type: problemjson.Base + "in-flight", Title: "Request with this idempotency key is in progress", Status: http.StatusConflict, RetryAfter: 1}
	probMismatch      = problem{Type: problemjson.Base + "payload-mismatch", Title: "Idempotency key reused with a different request", Status: http.StatusUnprocessableEntity}
	probStore         = problemjson.StoreUnavailable
	probStoreFull     = problem{Type: problemjson.Base + "store-full", Title: "Idempotency store full", Status: http.StatusServiceUnavailable, RetryAfter: 5}
	probUnreadable    = problem{Type: problemjson.Base + "record-unreadable", Title: "Recorded response unreadable", Status: http.StatusServiceUnavailable}
	probUnreachable   = problem{Type: problemjson.Base + "upstream-unreachable", Title: "Upstream unreachable", Status: http.StatusBadGateway}
	probUpstreamError = problem{Type: problemjson.Base + "upstream-failed", Title: "Upstream failed after the request was sent", Status: http.StatusBadGateway}
	probAmbiguousPath = problem{Type: problemjson.Base + "ambiguous-path", Title: "Request target can be read two ways", Status: http.StatusBadRequest}
	// The method-override headers name more than one method.
	probAmbiguousMethod = problem{Type: problemjson.Base + "ambiguous-method", Title: "Request method can be read two ways", Status: http.StatusBadRequest}
	probKeyExpired      = problem{Type: problemjson.Base + "key-expired", Title: "Idempotency key expired", Status: http.StatusGone}
	// The request goes on: a retry after a second gets 409 or its answer.
	probUpstreamTimeout = problem{Type: problemjson.Base + "upstream-timeout", Title: "Upstream did not answer in time; the request is still running", Status: http.StatusGatewayTimeout, RetryAfter: 1}
	// An unknown, expired or foreign status URL (asyncstatus.go).
	probStatusUnknown = problem{Type: problemjson.Base + "status-unknown", Title: "No such request status", Status: http.StatusNotFound}
	probStatusMethod  = problem{Type: problemjson.Base + "status-method", Title: "A status URL answers GET and HEAD only", Status: http.StatusMethodNotAllowed}
)

// problemTypes is every problem the proxy answers. clients/contract.json
// decides what a client does with each; TestEveryProblemTypeHasAClientDecision
// fails when the two disagree, or when a problem is missing here.
var problemTypes = []problem{
	probMissingKey, probInvalidKey, probBadBody, probAmbiguousBody, probTooLarge, probInFlight, probMismatch,
	probStore, probStoreFull, probUnreadable, probUnreachable, probUpstreamError, probAmbiguousPath,
	probAmbiguousMethod, probUpstreamTimeout, probKeyExpired, probStatusUnknown, probStatusMethod,
	probStreamingCall,
}

// problemJSON is the application/problem+json body of p.
func problemJSON(p problem, detail string) []byte { return p.Body(detail).Marshal() }

// writeProblem answers with an application/problem+json body.
func writeProblem(w http.ResponseWriter, p problem, detail string) {
	problemjson.Write(w, p.Body(detail), p.RetryAfter)
}
