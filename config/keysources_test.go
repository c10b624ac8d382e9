package config

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/proxy"
)

// A place that sets header or key_sources replaces what it inherited for
// either: the two keys name the same thing.
func TestRouteKeySourceOverridesEitherInheritedKey(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	doc := `upstream: {url: "http://127.0.0.1:3000"}
defaults:
  key_sources: ["json:/id", "header:X-Request-Id"]
routes:
  - match: /inherits/
  - match: /header/
    header: X-GitHub-Delivery
  - match: /sources/
    key_sources: [body_sha256]
`
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(Source{File: file})
	if err != nil {
		t.Fatal(err)
	}
	got := func(p proxy.Policy) []string {
		out := []string{"header=" + p.Header}
		for _, k := range p.KeySources {
			out = append(out, k.String())
		}
		return out
	}
	for _, tc := range []struct {
		name string
		p    proxy.Policy
		want []string
	}{
		{"defaults", cfg.Defaults, []string{"header=", "json:/id", "header:X-Request-Id"}},
		{"inherits", cfg.Routes[0].Policy, []string{"header=", "json:/id", "header:X-Request-Id"}},
		{"header", cfg.Routes[1].Policy, []string{"header=X-Github-Delivery"}},
		{"sources", cfg.Routes[2].Policy, []string{"header=", "body_sha256"}},
	} {
		if g := got(tc.p); !slices.Equal(g, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, g, tc.want)
		}
	}

	// The environment over the file: its key_sources replaces the file's header.
	cfg, err = Load(Source{File: file, Env: []string{"IDEMPOTENCY_PROXY_DEFAULTS_HEADER=X-Env-Key"}})
	if err != nil {
		t.Fatal(err)
	}
	if g := got(cfg.Defaults); !slices.Equal(g, []string{"header=X-Env-Key"}) {
		t.Errorf("defaults with the environment's header: %q", g)
	}
}
