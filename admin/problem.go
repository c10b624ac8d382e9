package admin

import (
	"context"
	"errors"
	"net/http"

	"github.com/idempotency-proxy/idempotency-proxy/internal/problemjson"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// problem is one kind of admin error response (RFC 9457), with a type URI
// under the proxy's own problem base. Its RetryAfter is not used: the admin
// API asks for a retry after a second on every 503 (writeProblem).
type problem = problemjson.Problem

var (
	probUnauthorized = problem{Type: problemjson.Base + "admin-unauthorized", Title: "Admin token missing or wrong", Status: http.StatusUnauthorized}
	probBadRequest   = problem{Type: problemjson.Base + "admin-bad-request", Title: "Malformed admin request", Status: http.StatusBadRequest}
	probNoResource   = problem{Type: problemjson.Base + "admin-not-found", Title: "No such admin resource", Status: http.StatusNotFound}
	probMethod       = problem{Type: problemjson.Base + "admin-method-not-allowed", Title: "Method not served on this admin resource", Status: http.StatusMethodNotAllowed}
	probNotFound     = problem{Type: problemjson.Base + "key-not-found", Title: "No lease or record under this key", Status: http.StatusNotFound}
	probUnsupported  = problem{Type: problemjson.Base + "admin-unsupported", Title: "This store does not support the key API", Status: http.StatusNotImplemented}
	probStore        = problemjson.StoreUnavailable
	probInternal     = problem{Type: problemjson.Base + "admin-failed", Title: "Admin operation failed", Status: http.StatusInternalServerError}
)

// problemTypes is every problem the admin API answers, each listed in
// clients/contract.json (TestEveryAdminProblemTypeIsInTheContract).
var problemTypes = []problem{probUnauthorized, probBadRequest, probNoResource, probMethod, probNotFound, probUnsupported, probStore, probInternal}

type problemBody = problemjson.Body

// writeProblem answers with p's problem+json body; a 503 says when to retry.
func writeProblem(w http.ResponseWriter, p problem, detail string) {
	retryAfter := 0
	if p.Status == http.StatusServiceUnavailable {
		retryAfter = 1
	}
	problemjson.Write(w, p.Body(detail), retryAfter)
}

// storeProblem maps a store error to its answer and metrics result: the one
// place that does.
func storeProblem(err error) (problem, string) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return probNotFound, resultNotFound
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return probStore, resultError
	}
	return probInternal, resultError
}
