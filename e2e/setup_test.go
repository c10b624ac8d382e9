package e2e

import (
	"math/rand/v2"
	"testing"
	"time"
)

// baseConfig protects every route of up with a store at redisURL, with
// short leases so that lease expiry fits in a test.
func baseConfig(up *upstream, redisURL string) proxyConfig {
	return proxyConfig{
		Upstream:        up.URL(),
		UpstreamTimeout: 10 * time.Second,
		ShutdownTimeout: 10 * time.Second,
		RedisURL:        redisURL,
		Defaults: map[string]string{
			"ttl":      "5m",
			"lock_ttl": "2s",
		},
	}
}

// startReplicas starts n proxies with the same config.
func startReplicas(t testing.TB, n int, cfg proxyConfig) []*proxyProc {
	t.Helper()
	ps := make([]*proxyProc, n)
	for i := range ps {
		ps[i] = startProxy(t, "replica"+string(rune('a'+i)), cfg)
	}
	return ps
}

// bases are the proxy listener URLs of ps.
func bases(ps []*proxyProc) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.URL()
	}
	return out
}

// testRand is a deterministic source for jitter, distinct per caller.
func testRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x1de)) }
