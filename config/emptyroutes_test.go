package config

import (
	"slices"
	"strings"
	"testing"
)

// An IDEMPOTENCY_PROXY_ROUTES set but empty (a ConfigMap or Secret without
// its key) is refused: read as no routes, it would drop every route of the
// file without a word. "[]" says no routes.
func TestEmptyRoutesVariableIsRefusedNotReadAsNoRoutes(t *testing.T) {
	file := writeFile(t, upstreamOnly+"routes:\n  - match: \"POST /v1/charges\"\n    require_key: true\n")
	for _, value := range []string{"", "  ", "\n", "# no routes"} {
		got := problemLines(t, Source{File: file, Env: []string{"IDEMPOTENCY_PROXY_ROUTES=" + value}})
		want := []string{"routes: empty: write [] for no routes (from IDEMPOTENCY_PROXY_ROUTES)"}
		if !slices.Equal(got, want) {
			t.Errorf("IDEMPOTENCY_PROXY_ROUTES=%q: problems:\n%s\nwant:\n%s", value, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	cfg, err := Load(Source{File: file, Env: []string{"IDEMPOTENCY_PROXY_ROUTES=[]"}})
	if err != nil {
		t.Fatalf("IDEMPOTENCY_PROXY_ROUTES=[]: %v", err)
	}
	if len(cfg.Routes) != 0 {
		t.Errorf("IDEMPOTENCY_PROXY_ROUTES=[]: %d routes, want none", len(cfg.Routes))
	}
}
