package config

import (
	"reflect"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/proxy"
)

// status_ttl is a mapping of statuses or classes to durations, from the
// file or as a YAML or JSON mapping from the environment; a route that
// sets it replaces the inherited mapping whole.
func TestStatusTTLLoads(t *testing.T) {
	cfg := mustLoad(t, Source{File: writeFile(t, upstreamOnly+`
defaults:
  status_ttl: {"5XX": 1m, 404: 10m}
routes:
  - match: "/inherits/"
  - match: "/own/"
    status_ttl: {"2xx": 72h}
`)})
	defaults := proxy.StatusTTL{"5xx": time.Minute, "404": 10 * time.Minute}
	if got := cfg.Defaults.StatusTTL; !reflect.DeepEqual(got, defaults) {
		t.Errorf("defaults.status_ttl = %v, want %v", got, defaults)
	}
	if got := cfg.Routes[0].StatusTTL; !reflect.DeepEqual(got, defaults) {
		t.Errorf("inherited status_ttl = %v, want %v", got, defaults)
	}
	if got, want := cfg.Routes[1].StatusTTL, (proxy.StatusTTL{"2xx": 72 * time.Hour}); !reflect.DeepEqual(got, want) {
		t.Errorf("route status_ttl = %v, want %v, not merged", got, want)
	}
	env := mustLoad(t, Source{File: writeFile(t, upstreamOnly), Env: []string{`IDEMPOTENCY_PROXY_DEFAULTS_STATUS_TTL={"5xx": "30s"}`}})
	if got, want := env.Defaults.StatusTTL, (proxy.StatusTTL{"5xx": 30 * time.Second}); !reflect.DeepEqual(got, want) {
		t.Errorf("status_ttl from the environment = %v, want %v", got, want)
	}
}
