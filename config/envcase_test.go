package config

import (
	"slices"
	"strings"
	"testing"
)

// The proxy reads its variables by their upper-case names only, so one
// spelled in another case would be ignored; it is refused as a typo is,
// naming the variable it meant.
func TestVariableSpelledInAnotherCaseIsRefused(t *testing.T) {
	got := problemLines(t, Source{Env: []string{
		"IDEMPOTENCY_PROXY_UPSTREAM_URL=http://127.0.0.1:3000",
		"idempotency_proxy_defaults_ttl=1h",
		"Idempotency_Proxy_Store_Redis_Url=redis://127.0.0.1:6390/0",
		"idempotency_proxy_config=config.yaml",
	}})
	want := []string{
		"Idempotency_Proxy_Store_Redis_Url: unknown environment variable; did you mean IDEMPOTENCY_PROXY_STORE_REDIS_URL?",
		"idempotency_proxy_config: unknown environment variable; did you mean IDEMPOTENCY_PROXY_CONFIG?",
		"idempotency_proxy_defaults_ttl: unknown environment variable; did you mean IDEMPOTENCY_PROXY_DEFAULTS_TTL?",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
