package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/proxy"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Every message about a missing or mistyped setting names what fixes it.
func TestProblemsSayHowToFix(t *testing.T) {
	tests := []struct {
		name string
		src  Source
		want []string
	}{
		{"nothing set names the flag and the variable", Source{}, []string{
			"upstream.url: required: set it with --upstream or IDEMPOTENCY_PROXY_UPSTREAM_URL (e.g. http://127.0.0.1:3000)",
		}},
		{"a group named instead of its key", Source{Env: []string{"IDEMPOTENCY_PROXY_UPSTREAM=http://127.0.0.1:3000"}}, []string{
			"IDEMPOTENCY_PROXY_UPSTREAM: unknown environment variable; did you mean IDEMPOTENCY_PROXY_UPSTREAM_URL?",
			"upstream.url: required: set it with --upstream or IDEMPOTENCY_PROXY_UPSTREAM_URL (e.g. http://127.0.0.1:3000)",
		}},
		{"the file's variable", Source{Env: []string{"IDEMPOTENCY_PROXY_CONFG=config.yaml"}}, []string{
			"IDEMPOTENCY_PROXY_CONFG: unknown environment variable; did you mean IDEMPOTENCY_PROXY_CONFIG?",
			"upstream.url: required: set it with --upstream or IDEMPOTENCY_PROXY_UPSTREAM_URL (e.g. http://127.0.0.1:3000)",
		}},
		{"a variable far from every key", Source{Env: []string{
			"IDEMPOTENCY_PROXY_UPSTREAM_URL=http://127.0.0.1:3000",
			"IDEMPOTENCY_PROXY_COLOUR=blue",
		}}, []string{
			"IDEMPOTENCY_PROXY_COLOUR: unknown environment variable",
		}},
		{"values from the environment and flags say so", Source{
			Env: []string{
				"IDEMPOTENCY_PROXY_UPSTREAM_URL=ftp://x",
				"IDEMPOTENCY_PROXY_DEFAULTS_TTL=10s",
			},
			Overrides: map[string]string{"admin_listen": "9090"},
		}, []string{
			`admin_listen: invalid address "9090" (want host:port, e.g. :8080) (from --admin-listen)`,
			`upstream.url: scheme must be http or https, not "ftp" (from IDEMPOTENCY_PROXY_UPSTREAM_URL)`,
			"defaults.lock_ttl: 30s (built-in default) exceeds ttl 10s (from IDEMPOTENCY_PROXY_DEFAULTS_TTL): lower lock_ttl or raise ttl",
		}},
		{"redis without an address", Source{Env: []string{
			"IDEMPOTENCY_PROXY_UPSTREAM_URL=http://127.0.0.1:3000",
			"IDEMPOTENCY_PROXY_STORE_KIND=redis",
		}}, []string{
			"store.kind: redis needs store.redis.url or store.redis.addrs: set --redis-url or IDEMPOTENCY_PROXY_STORE_REDIS_URL (from IDEMPOTENCY_PROXY_STORE_KIND)",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := problemLines(t, tt.src); !slices.Equal(got, tt.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestNewKeys(t *testing.T) {
	cfg := mustLoad(t, Source{
		File: writeFile(t, upstreamOnly+`
store:
  memory:
    when_full: evict_oldest
admin:
  token_file: /run/secrets/admin-token
  pprof: true
tracing:
  enabled: true
defaults:
  fingerprint_host: false
  scope_headers: [authorization, "cookie: sid"]
routes:
  - match: /a/
`),
		Env: []string{"IDEMPOTENCY_PROXY_ROUTES=[{match: /b/, fingerprint_host: true}]"},
	})
	if got := cfg.Store.Memory.WhenFull; got != store.EvictOldest {
		t.Errorf("store.memory.when_full = %q", got)
	}
	if a := cfg.Admin; a.TokenFile != "/run/secrets/admin-token" || !a.PProf || a.Token != "" {
		t.Errorf("admin = %+v", a)
	}
	if !cfg.Tracing.Enabled {
		t.Error("tracing.enabled = false")
	}
	if cfg.Defaults.FingerprintHost || !cfg.Routes[0].FingerprintHost {
		t.Errorf("fingerprint_host: defaults %t, route %t", cfg.Defaults.FingerprintHost, cfg.Routes[0].FingerprintHost)
	}
	// The cookie's name keeps its case: cookie names are case-sensitive.
	if got, want := cfg.Defaults.ScopeHeaders, []proxy.ScopeHeader{{Header: "Authorization"}, {Cookie: "sid"}}; !slices.Equal(got, want) {
		t.Errorf("scope_headers = %q, want %q", got, want)
	}
	env := mustLoad(t, Source{Env: []string{
		"IDEMPOTENCY_PROXY_UPSTREAM_URL=http://127.0.0.1:3000",
		"IDEMPOTENCY_PROXY_ADMIN_TOKEN=s3cret",
		"IDEMPOTENCY_PROXY_DEFAULTS_CONCURRENT=wait",
		"IDEMPOTENCY_PROXY_DEFAULTS_ON_UPSTREAM_ERROR=keep",
	}})
	if env.Admin.Token != "s3cret" || env.Defaults.Concurrent != proxy.ConcurrentWait || env.Defaults.OnUpstreamError != proxy.UpstreamErrorKeep {
		t.Errorf("admin.token %q, concurrent %s, on_upstream_error %s", env.Admin.Token, env.Defaults.Concurrent, env.Defaults.OnUpstreamError)
	}
}

// Reload applies the admin token (the file is read again too); pprof and
// tracing are built once.
func TestRestartNeededForNewKeys(t *testing.T) {
	old := mustLoad(t, Source{File: "../config.example.yaml"})
	c := mustLoad(t, Source{File: "../config.example.yaml"})
	c.Admin.Token = "new"
	c.Defaults.FingerprintHost = false
	c.Store.Memory.WhenFull = store.EvictOldest
	c.Admin.PProf = true
	c.Tracing.Enabled = true
	want := []string{"store.memory.when_full", "admin.pprof", "tracing.enabled"}
	if got := c.RestartNeeded(old); !slices.Equal(got, want) {
		t.Errorf("RestartNeeded = %q, want %q", got, want)
	}
}

func TestSuggest(t *testing.T) {
	known := []string{"ttl", "lock_ttl", "wait_timeout", "upstream_url", "upstream_timeout"}
	for name, want := range map[string]string{
		"tll":          "ttl",
		"lock_tll":     "lock_ttl",
		"lockttl":      "lock_ttl",
		"wait_tiemout": "wait_timeout",
		"upstream":     "upstream_url",
		"colour":       "",
		"t":            "",
	} {
		if got := suggest(name, known, "_"); got != want {
			t.Errorf("suggest(%q) = %q, want %q", name, got, want)
		}
	}
}

// The decoder follows the struct: a list of values that parse their own
// words, or of a named string type, needs no code of its own, so the next
// policy key of that shape is one tagged field.
func TestDecodeFollowsTheStruct(t *testing.T) {
	type name string
	var got struct {
		Words []proxy.Concurrency `config:"words"`
		Names []name              `config:"names,header"`
	}
	d := newDecoder()
	d.mapping("p", map[string]any{"words": []any{"wait", "reject"}, "names": "x-a, x-b"}, reflect.ValueOf(&got).Elem())
	if len(d.problems) != 0 || !slices.Equal(got.Words, []proxy.Concurrency{proxy.ConcurrentWait, proxy.ConcurrentReject}) ||
		!slices.Equal(got.Names, []name{"X-A", "X-B"}) {
		t.Errorf("decoded %+v, problems %v", got, d.problems)
	}
	d = newDecoder()
	d.mapping("p", map[string]any{"words": []any{"wait", "later"}}, reflect.ValueOf(&got).Elem())
	if len(d.problems) != 1 || d.problems[0].Error() != `p.words[1]: must be one of reject, wait; got "later"` {
		t.Errorf("problems = %v", d.problems)
	}
}
