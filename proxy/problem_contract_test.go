package proxy

import (
	"slices"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/problemjson"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/contract"
)

// notYetAnswered are problem types the contract decides for clients before
// the proxy answers them, so clients ship ready for them. Each leaves this
// list in the change that makes the proxy answer it.
var notYetAnswered = []string{}

// Every problem the proxy answers is in clients/contract.json with the same
// status and Retry-After, so no problem type reaches clients undecided, and
// the contract lists no proxy problem the proxy does not answer.
func TestEveryProblemTypeHasAClientDecision(t *testing.T) {
	c, err := contract.Load(".")
	if err != nil {
		t.Fatal(err)
	}
	if c.ProblemBase != problemjson.Base {
		t.Errorf("contract problem_base %q, problemjson.Base %q", c.ProblemBase, problemjson.Base)
	}
	if c.AcceptedAsync.ReleasedHeader != ReleasedHeader {
		t.Errorf("contract released_header %q, the proxy marks a released request's poll with %q", c.AcceptedAsync.ReleasedHeader, ReleasedHeader)
	}
	declared, err := contract.DeclaredTypes(".", "problem", "problemjson.Base")
	if err != nil {
		t.Fatal(err)
	}
	// The problems both listeners answer are declared once, in problemjson.
	shared, err := contract.DeclaredTypes("../internal/problemjson", "Problem", "Base")
	if err != nil {
		t.Fatal(err)
	}
	declared = append(declared, shared...)
	slices.Sort(declared)
	var listed []string
	for _, p := range problemTypes {
		listed = append(listed, strings.TrimPrefix(p.Type, problemjson.Base))
	}
	slices.Sort(listed)
	if !slices.Equal(listed, declared) {
		t.Errorf("problemTypes lists %q, the package declares %q", listed, declared)
	}
	for _, p := range problemTypes {
		name := strings.TrimPrefix(p.Type, problemjson.Base)
		row, ok := c.ByType(name)
		switch {
		case !ok:
			t.Errorf("problem %s is not in %s: decide what clients do with it", name, contract.Path)
		case !row.On(contract.ListenerProxy):
			t.Errorf("problem %s: %s does not list it on the proxy listener", name, contract.Path)
		case row.Status != p.Status:
			t.Errorf("problem %s: status %d, %s says %d", name, p.Status, contract.Path, row.Status)
		case row.RetryAfter != (p.RetryAfter > 0):
			t.Errorf("problem %s: sends Retry-After %v, %s says %v", name, p.RetryAfter > 0, contract.Path, row.RetryAfter)
		}
	}
	for _, row := range c.Problems {
		if row.On(contract.ListenerProxy) && !slices.Contains(listed, row.Type) && !slices.Contains(notYetAnswered, row.Type) {
			t.Errorf("%s lists problem %s on the proxy listener, which the proxy never answers", contract.Path, row.Type)
		}
		if slices.Contains(listed, row.Type) && slices.Contains(notYetAnswered, row.Type) {
			t.Errorf("problem %s is answered now: remove it from notYetAnswered", row.Type)
		}
	}
}

// A gRPC call is told each problem as the status clients/contract.json's
// gRPC column gives it: grpcCodes and the contract are one list.
func TestEveryProblemHasTheContractsGRPCStatus(t *testing.T) {
	c, err := contract.Load(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problemTypes {
		name := strings.TrimPrefix(p.Type, problemjson.Base)
		row, ok := c.ByType(name)
		if !ok {
			continue // TestEveryProblemTypeHasAClientDecision says so
		}
		want, err := row.GRPCCode()
		if err != nil {
			t.Errorf("problem %s: %v", name, err)
			continue
		}
		if got, ok := grpcCodes[p.Type]; !ok || got != want {
			t.Errorf("problem %s: a gRPC call gets %v (listed: %v), %s says %v", name, got, ok, contract.Path, want)
		}
	}
	if len(grpcCodes) != len(problemTypes) {
		t.Errorf("grpcCodes has %d problems, problemTypes %d: one list", len(grpcCodes), len(problemTypes))
	}
	if c.GRPC.TypeIn != "grpc-message" || c.GRPC.Pushback != "grpc-retry-pushback-ms" || c.GRPC.Replayed != "idempotent-replayed" {
		t.Errorf("contract's grpc fields %+v, want the fields writeGRPCProblem and replay use", c.GRPC)
	}
}

// A status the proxy releases the key on by default says the upstream did
// not process the request: clients/contract.json retries it with the same
// key, so no client reports an operation that never ran as its answer.
func TestEveryDefaultReleaseStatusIsRetriedByClients(t *testing.T) {
	c, err := contract.Load(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, code := range DefaultPolicy().ReleaseStatuses {
		if got := c.Action(code, false); got != contract.Retry {
			t.Errorf("release status %d: clients %s, want %s", code, got, contract.Retry)
		}
	}
}
