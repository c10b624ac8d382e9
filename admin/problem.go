package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

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

type problemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

func writeProblem(w http.ResponseWriter, p problem, detail string) {
	body, _ := json.Marshal(problemBody{Type: p.Type, Title: p.Title, Status: p.Status, Detail: detail})
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	if p.Status == http.StatusServiceUnavailable {
		h.Set("Retry-After", "1")
	}
	w.WriteHeader(p.Status)
	w.Write(body)
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
