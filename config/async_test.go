package config

import (
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/proxy"
)

// A route that answers 202 under Prefer: respond-async needs a secret to
// sign its status URLs, and the status URLs a path of their own, which no
// route's path starts with: each mistake is named by its key, with what to
// set.
func TestAsyncNeedsASecretAndAPath(t *testing.T) {
	const up = "upstream:\n  url: http://127.0.0.1:3000\n"
	const secret = "async_secret: 0123456789abcdef0123456789abcdef\n"
	for yaml, want := range map[string]string{
		up + "routes:\n  - match: POST /v1/reports\n    async: allow\n": "async_secret: required by routes[0].async: allow; set at least 16 random bytes",
		up + "defaults:\n  async: allow\n":                              "async_secret: required by defaults.async: allow",
		up + "async_secret: short\n":                                    "async_secret: must be at least 16 bytes, not 5",
		up + "async_path: /status\n":                                    `async_path: must be a path starting and ending with "/", such as "/.well-known/idempotency/", not "/status"`,
		up + "defaults:\n  async: sometimes\n":                          `defaults.async: must be one of off, allow; got "sometimes"`,
		up + secret + "async_path: /v1/\nroutes:\n  - match: POST api.example.com/v1/reports/{id}\n":         `async_path: "/v1/" would take the requests of routes[0] ("POST api.example.com/v1/reports/{id}") for status polls`,
		up + secret + "async_path: /V1/\nroutes:\n  - match: POST /v1/reports\n    path_case: insensitive\n": `async_path: "/V1/" would take the requests of routes[0] ("POST /v1/reports") for status polls`,
	} {
		_, err := Load(Source{File: writeFile(t, yaml)})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one containing %q", yaml, err, want)
		}
	}
	cfg, err := Load(Source{
		File: writeFile(t, up+"routes:\n  - match: POST /v1/reports\n    async: allow\n"),
		Env:  []string{"IDEMPOTENCY_PROXY_ASYNC_SECRET=0123456789abcdef0123456789abcdef"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Routes[0].Async != proxy.AsyncAllow || cfg.Defaults.Async != proxy.AsyncOff || cfg.AsyncPath != proxy.DefaultAsyncPath {
		t.Errorf("route async %s, defaults async %s, async_path %q", cfg.Routes[0].Async, cfg.Defaults.Async, cfg.AsyncPath)
	}
}
