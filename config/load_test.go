package config

import (
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/bytesize"
	"github.com/idempotency-proxy/idempotency-proxy/proxy"
)

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func mustLoad(t *testing.T, src Source) *Config {
	t.Helper()
	cfg, err := Load(src)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return cfg
}

// writeFile writes a config file in a per-test directory.
func writeFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const upstreamOnly = "upstream:\n  url: http://127.0.0.1:3000\n"

func TestLoadDefaultsWithoutFile(t *testing.T) {
	got := mustLoad(t, Source{Overrides: map[string]string{"upstream.url": "http://127.0.0.1:3000"}})
	want := Default()
	want.Upstream.URL = mustURL(t, "http://127.0.0.1:3000")
	want.Store.Kind = StoreMemory
	got.origins = nil // where each value came from: TestViewNamesEachValuesOrigin
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Load() =\n%+v\nwant\n%+v", got, want)
	}
}

func TestExampleFile(t *testing.T) {
	got := mustLoad(t, Source{File: "../config.example.yaml"})
	if got.Upstream.URL.String() != "http://127.0.0.1:3000" {
		t.Errorf("upstream.url = %s", got.Upstream.URL)
	}
	if n := len(got.Routes); n != 4 {
		t.Fatalf("%d routes, want the 4 examples", n)
	}
	// Every key the example shows must be the built-in default.
	want := Default()
	want.Upstream.URL = got.Upstream.URL
	want.Store.Kind = StoreMemory
	want.File = "../config.example.yaml"
	routes := got.Routes
	got.Routes = want.Routes
	got.origins = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("example defaults =\n%+v\nwant built-in\n%+v", got, want)
	}
	charges := clonePolicy(want.Defaults)
	charges.TTL, charges.RequireKey = 72*time.Hour, true
	charges.OnUpstreamError, charges.AmbiguousStatuses = proxy.UpstreamErrorReconcile, []int{502, 504}
	charges.Reconcile.Request, charges.Reconcile.Resend = "GET /v1/charges?idempotency_key={key}", true
	comments := clonePolicy(want.Defaults)
	comments.TTL, comments.OnStoreError = time.Hour, proxy.FailOpen
	graphql := clonePolicy(want.Defaults)
	graphql.GraphQL = true
	wantRoutes := []Route{
		{Match: "POST /v1/charges", Enabled: true, Policy: charges},
		{Match: "/v1/comments/", Enabled: true, Policy: comments},
		{Match: "POST /graphql", Enabled: true, Policy: graphql},
		{Match: "/internal/", Enabled: false, Policy: clonePolicy(want.Defaults)},
	}
	if !reflect.DeepEqual(routes, wantRoutes) {
		t.Errorf("example routes =\n%+v\nwant\n%+v", routes, wantRoutes)
	}
}

func TestRouteInheritance(t *testing.T) {
	cfg := mustLoad(t, Source{File: writeFile(t, upstreamOnly+`
defaults:
  methods: [POST, PUT]
  scope_headers: [x-api-key]
  concurrent: wait
routes:
  - match: "/only-ttl/"
    ttl: 1h
  - match: "/methods/"
    methods: [post]
    scope_headers: []
`)})
	onlyTTL := clonePolicy(cfg.Defaults)
	onlyTTL.TTL = time.Hour
	if got := cfg.Routes[0].Policy; !reflect.DeepEqual(got, onlyTTL) {
		t.Errorf("route setting only ttl =\n%+v\nwant defaults with ttl 1h\n%+v", got, onlyTTL)
	}
	if got, want := cfg.Routes[0].ScopeHeaders, []proxy.ScopeHeader{{Header: "X-Api-Key"}}; !slices.Equal(got, want) {
		t.Errorf("inherited scope_headers = %q, want canonical %q", got, want)
	}
	if got, want := cfg.Routes[1].Methods, []string{"POST"}; !slices.Equal(got, want) {
		t.Errorf("methods = %q, want the route's list %q, not merged", got, want)
	}
	if got := cfg.Routes[1].ScopeHeaders; len(got) != 0 {
		t.Errorf("scope_headers = %q, want the route's empty list", got)
	}
	// Routes own their lists: changing one must not change the defaults.
	cfg.Routes[0].Methods[0] = "GET"
	if cfg.Defaults.Methods[0] != "POST" {
		t.Error("a route shares its methods slice with the defaults")
	}
}

func TestPrecedence(t *testing.T) {
	file := writeFile(t, upstreamOnly+`
listen: ":1000"
admin_listen: ":2000"
log_level: warn
store:
  kind: memory
defaults:
  lock_ttl: 10s
  methods: [POST]
`)
	tests := []struct {
		name  string
		env   []string
		flags map[string]string
		check func(t *testing.T, c *Config)
	}{
		{"file over default", nil, nil, func(t *testing.T, c *Config) {
			if c.Listen != ":1000" || c.LogLevel != LogWarn || c.ShutdownTimeout != 30*time.Second {
				t.Errorf("listen=%s log_level=%s shutdown=%s", c.Listen, c.LogLevel, c.ShutdownTimeout)
			}
		}},
		{"env over file", []string{
			"IDEMPOTENCY_PROXY_LISTEN=:1001",
			"IDEMPOTENCY_PROXY_DEFAULTS_LOCK_TTL=20s",
			"IDEMPOTENCY_PROXY_DEFAULTS_METHODS=post, put",
			"IDEMPOTENCY_PROXY_DEFAULTS_REQUIRE_KEY=true",
			"IDEMPOTENCY_PROXY_DEFAULTS_RELEASE_STATUSES=503",
			"IDEMPOTENCY_PROXY_STORE_MEMORY_MAX_BYTES=1GiB",
			"PATH=/usr/bin",
		}, nil, func(t *testing.T, c *Config) {
			d := c.Defaults
			if c.Listen != ":1001" || d.LockTTL != 20*time.Second || !d.RequireKey || c.Store.Memory.MaxBytes != bytesize.GiB {
				t.Errorf("listen=%s lock_ttl=%s require_key=%t max_bytes=%d", c.Listen, d.LockTTL, d.RequireKey, c.Store.Memory.MaxBytes)
			}
			if !slices.Equal(d.Methods, []string{"POST", "PUT"}) || !slices.Equal(d.ReleaseStatuses, []int{503}) {
				t.Errorf("methods=%q release_statuses=%v", d.Methods, d.ReleaseStatuses)
			}
			if c.AdminListen != ":2000" {
				t.Errorf("admin_listen = %s, want the file's value", c.AdminListen)
			}
		}},
		{"flag over env", []string{"IDEMPOTENCY_PROXY_LISTEN=:1001", "IDEMPOTENCY_PROXY_LOG_LEVEL=error"},
			map[string]string{"listen": ":1002", "log_level": "debug"}, func(t *testing.T, c *Config) {
				if c.Listen != ":1002" || c.LogLevel != LogDebug {
					t.Errorf("listen=%s log_level=%s, want the flags", c.Listen, c.LogLevel)
				}
			}},
		{"redis url switches the store", []string{"IDEMPOTENCY_PROXY_STORE_REDIS_URL=redis://127.0.0.1:6390/1"}, nil,
			func(t *testing.T, c *Config) {
				if c.Store.Kind != StoreRedis || c.Store.Redis.URL != "redis://127.0.0.1:6390/1" {
					t.Errorf("store = %+v, want redis", c.Store)
				}
			}},
		{"redis url flag over file kind memory", nil, map[string]string{"store.redis.url": "redis://127.0.0.1:6390/1"},
			func(t *testing.T, c *Config) {
				if c.Store.Kind != StoreRedis {
					t.Errorf("store.kind = %s, want redis: the flag promises to switch the store", c.Store.Kind)
				}
			}},
		{"postgres url flag over env redis url", []string{"IDEMPOTENCY_PROXY_STORE_REDIS_URL=redis://127.0.0.1:6390/1"},
			map[string]string{"store.postgres.url": "postgres://u:pw@127.0.0.1:5439/db"},
			func(t *testing.T, c *Config) {
				if c.Store.Kind != StorePostgres || c.Store.Postgres.URL != "postgres://u:pw@127.0.0.1:5439/db" {
					t.Errorf("store = %+v, want postgres: the flag wins over the environment", c.Store)
				}
			}},
		{"postgres url env switches the store", []string{"IDEMPOTENCY_PROXY_STORE_POSTGRES_URL=postgresql:///idem?host=/run/pg"}, nil,
			func(t *testing.T, c *Config) {
				if c.Store.Kind != StorePostgres || c.Store.Postgres.Table != "idempotency_keys" {
					t.Errorf("store = %+v, want postgres on its default table", c.Store)
				}
			}},
		{"explicit kind in the same layer wins", []string{
			"IDEMPOTENCY_PROXY_STORE_REDIS_ADDRS=127.0.0.1:7000,127.0.0.1:7001",
			"IDEMPOTENCY_PROXY_STORE_KIND=memory",
		}, nil, func(t *testing.T, c *Config) {
			if c.Store.Kind != StoreMemory || len(c.Store.Redis.Addrs) != 2 {
				t.Errorf("store = %+v, want memory with the addrs kept", c.Store)
			}
		}},
		{"last duplicate env wins", []string{"IDEMPOTENCY_PROXY_LISTEN=:1", "IDEMPOTENCY_PROXY_LISTEN=:2"}, nil,
			func(t *testing.T, c *Config) {
				if c.Listen != ":2" {
					t.Errorf("listen = %s, want :2", c.Listen)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, mustLoad(t, Source{File: file, Env: tt.env, Overrides: tt.flags}))
		})
	}
}

func TestRoutesFromEnv(t *testing.T) {
	tests := []struct {
		name, doc string
	}{
		{"json", `[{"match": "POST /v1/charges", "ttl": "72h"}, {"match": "/internal/", "enabled": false}]`},
		{"yaml", "- match: POST /v1/charges\n  ttl: 72h\n- match: /internal/\n  enabled: false\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustLoad(t, Source{
				File: writeFile(t, upstreamOnly+"routes:\n  - match: /from-file/\n"),
				Env:  []string{"IDEMPOTENCY_PROXY_ROUTES=" + tt.doc},
			})
			var got []string
			for _, r := range cfg.Routes {
				got = append(got, r.Match)
			}
			if want := []string{"POST /v1/charges", "/internal/"}; !slices.Equal(got, want) {
				t.Fatalf("routes = %q, want %q (the env list replaces the file's)", got, want)
			}
			if cfg.Routes[0].TTL != 72*time.Hour || cfg.Routes[1].Enabled {
				t.Errorf("routes = %+v", cfg.Routes)
			}
		})
	}
}

func TestEnvAndFlagProblems(t *testing.T) {
	got := problemLines(t, Source{
		Env: []string{
			"IDEMPOTENCY_PROXY_UPSTREAM_URL=http://127.0.0.1:3000",
			"IDEMPOTENCY_PROXY_DEFAULTS_LOCKTTL=1s",
			"IDEMPOTENCY_PROXY_DEFAULTS_TTL=3x",
			"IDEMPOTENCY_PROXY_ROUTES=[{match: /a/, tll: 1h}]",
		},
		Overrides: map[string]string{"upstream.tiemout": "1s", "defaults.wait_timeout": "soon"},
	})
	want := []string{
		"IDEMPOTENCY_PROXY_DEFAULTS_LOCKTTL: unknown environment variable; did you mean IDEMPOTENCY_PROXY_DEFAULTS_LOCK_TTL?",
		"upstream.tiemout: unknown key (from command line); did you mean upstream.timeout?",
		`defaults.ttl: invalid duration "3x" (want e.g. 250ms, 30s, 24h) (from IDEMPOTENCY_PROXY_DEFAULTS_TTL)`,
		`defaults.wait_timeout: invalid duration "soon" (want e.g. 250ms, 30s, 24h) (from command line)`,
		"routes[0].tll: unknown key; did you mean ttl? (from IDEMPOTENCY_PROXY_ROUTES)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestConfigFileFromEnv(t *testing.T) {
	file := writeFile(t, upstreamOnly+"listen: \":7000\"\n")
	cfg := mustLoad(t, Source{Env: []string{EnvConfigFile + "=" + file}})
	if cfg.File != file || cfg.Listen != ":7000" {
		t.Errorf("file=%q listen=%q, want the file named by %s", cfg.File, cfg.Listen, EnvConfigFile)
	}
}

func TestCaseInsensitiveKeys(t *testing.T) {
	cfg := mustLoad(t, Source{File: writeFile(t, "Upstream:\n  URL: http://127.0.0.1:3000\nRoutes:\n  - Match: /a/\n    TTL: 2h\n")})
	if cfg.Routes[0].TTL != 2*time.Hour {
		t.Errorf("ttl = %s, want 2h", cfg.Routes[0].TTL)
	}
}

// TestEnvNamesUnambiguous guards the reverse mapping from variable names to
// keys: two keys must never share a variable.
func TestEnvNamesUnambiguous(t *testing.T) {
	keys := Keys()
	if got, want := len(envKeys()), len(keys); got != want {
		t.Errorf("%d variable names for %d keys", got, want)
	}
	for _, k := range []string{"upstream.url", "store.redis.url", "defaults.lock_ttl", "routes"} {
		if !slices.Contains(keys, k) {
			t.Errorf("Keys() lacks %q", k)
		}
	}
	if got, want := EnvVar("defaults.lock_ttl"), "IDEMPOTENCY_PROXY_DEFAULTS_LOCK_TTL"; got != want {
		t.Errorf("EnvVar = %s, want %s", got, want)
	}
}

// A problem in the routes IDEMPOTENCY_PROXY_ROUTES gives names the variable,
// and never the line of the file's routes it replaced.
func TestRouteProblemFromTheEnvironmentNamesTheVariable(t *testing.T) {
	file := writeFile(t, upstreamOnly+"routes:\n  - match: \"POST /a\"\n    ttl: 1h\n")
	_, err := Load(Source{File: file, Env: []string{
		`IDEMPOTENCY_PROXY_ROUTES=[{match: "POST /a", ttl: soon}, {match: "POST /b", tll: 1h}, {match: "POST /c", ttl: 1s}]`,
	}})
	if err == nil {
		t.Fatal("Load accepted the routes")
	}
	want := []string{
		`routes[0].ttl: invalid duration "soon" (want e.g. 250ms, 30s, 24h) (from IDEMPOTENCY_PROXY_ROUTES)`,
		"routes[1].tll: unknown key; did you mean ttl? (from IDEMPOTENCY_PROXY_ROUTES)",
		"routes[2].lock_ttl: 30s (from defaults) exceeds ttl 1s (from IDEMPOTENCY_PROXY_ROUTES): lower lock_ttl or raise ttl",
	}
	if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
