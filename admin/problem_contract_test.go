package admin

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/problemjson"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/contract"
)

// Every problem the admin API answers is in clients/contract.json with the
// same status, and the contract lists no admin problem the API never answers.
func TestEveryAdminProblemTypeIsInTheContract(t *testing.T) {
	c, err := contract.Load(".")
	if err != nil {
		t.Fatal(err)
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
			t.Errorf("admin problem %s is not in %s", name, contract.Path)
		case !row.On(contract.ListenerAdmin):
			t.Errorf("admin problem %s: %s does not list it on the admin listener", name, contract.Path)
		case row.Status != p.Status:
			t.Errorf("admin problem %s: status %d, %s says %d", name, p.Status, contract.Path, row.Status)
		case row.RetryAfter != (p.Status == http.StatusServiceUnavailable):
			t.Errorf("admin problem %s: sends Retry-After %v, %s says %v", name, p.Status == http.StatusServiceUnavailable, contract.Path, row.RetryAfter)
		}
	}
	for _, row := range c.Problems {
		if row.On(contract.ListenerAdmin) && !slices.Contains(listed, row.Type) {
			t.Errorf("%s lists problem %s on the admin listener, which the admin API never answers", contract.Path, row.Type)
		}
	}
}
