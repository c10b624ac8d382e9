package admin

import (
	"context"
	"errors"
	"net/http"

	"github.com/idempotency-proxy/idempotency-proxy/internal/problemjson"
	"github.com/idempotency-proxy/idempotency-proxy/proxy"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// problem is one kind of admin error response (RFC 9457), with a type URI
// under the proxy's own problem base.
type problem struct {
	Type   string
	Title  string
	Status int
}

var (
	probUnauthorized = problem{proxy.ProblemBase + "admin-unauthorized", "Admin token missing or wrong", http.StatusUnauthorized}
	probBadRequest   = problem{proxy.ProblemBase + "admin-bad-request", "Malformed admin request", http.StatusBadRequest}
	probNotFound     = problem{proxy.ProblemBase + "key-not-found", "No lease or record under this key", http.StatusNotFound}
	probUnsupported  = problem{proxy.ProblemBase + "admin-unsupported", "This store does not support the key API", http.StatusNotImplemented}
	probStore        = problem{proxy.ProblemBase + "store-unavailable", "Idempotency store unavailable", http.StatusServiceUnavailable}
	probInternal     = problem{proxy.ProblemBase + "admin-failed", "Admin operation failed", http.StatusInternalServerError}
)

// problemTypes is every problem the admin API answers, each listed in
// clients/contract.json (TestEveryAdminProblemTypeIsInTheContract).
var problemTypes = []problem{probUnauthorized, probBadRequest, probNotFound, probUnsupported, probStore, probInternal}

type problemBody = problemjson.Body

// writeProblem answers with p's problem+json body; a 503 says when to retry.
func writeProblem(w http.ResponseWriter, p problem, detail string) {
	retryAfter := 0
	if p.Status == http.StatusServiceUnavailable {
		retryAfter = 1
	}
	problemjson.Write(w, problemBody{Type: p.Type, Title: p.Title, Status: p.Status, Detail: detail}, retryAfter)
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
