package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
)

// TestEvictingRedisIsReportedNotFatal starts the proxy against a real
// Redis whose maxmemory-policy may evict the proxy's keys (docs/redis.md):
// the proxy serves and stays ready, but logs the policy and the fix at
// error level, names the unsafe eviction in /readyz and sets
// idempotency_proxy_store_eviction_unsafe. Under noeviction it reports
// nothing. volatile-lru matters most: every lease and record has a TTL, so
// it is exactly what a volatile-* policy evicts. (allkeys-lru, and the
// switch to noeviction at run time, are covered in
// cmd/idempotency-proxy TestUnsafeEvictionIsReportedNotFatal.)
func TestEvictingRedisIsReportedNotFatal(t *testing.T) {
	up := startUpstream(t)
	c := newClient(t, 10*time.Second)
	for _, tc := range []struct {
		policy string
		unsafe bool
	}{
		{policy: "volatile-lru", unsafe: true},
		{policy: "noeviction", unsafe: false},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			srv := redistest.Start(t, "--maxmemory", "64mb", "--maxmemory-policy", tc.policy)
			p := startProxy(t, tc.policy, baseConfig(up, srv.URL())) // returns once /readyz is 200

			code, body := getReadyz(t, p)
			warned := strings.Contains(body, "store eviction unsafe") && strings.Contains(body, "maxmemory-policy is "+tc.policy)
			if code != http.StatusOK || warned != tc.unsafe || !tc.unsafe && body != "ok\n" {
				t.Errorf("/readyz = %d %q, want 200 naming the unsafe eviction: %v", code, body, tc.unsafe)
			}
			if got, want := metricSum(t, mEvictionUnsafe, nil, p), flagValue(tc.unsafe); got != want {
				t.Errorf("%s = %v, want %v", mEvictionUnsafe, got, want)
			}
			line := findLogLine(p.Logs(), "ERROR", logMayEvict)
			switch {
			case tc.unsafe && line == nil:
				t.Errorf("no ERROR line %q naming the policy:\n%s", logMayEvict, p.Logs())
			case tc.unsafe:
				msg, _ := line["msg"].(string)
				if line["maxmemory_policy"] != tc.policy || !strings.Contains(msg, "maxmemory-policy noeviction") {
					t.Errorf("eviction log line %v: want maxmemory_policy %q and the fix (maxmemory-policy noeviction)", line, tc.policy)
				}
			case line != nil:
				t.Errorf("eviction warning logged under noeviction: %v", line)
			}

			// The proxy protects requests all the same.
			key := "evict-" + tc.policy
			first := mustSend(t, c, p.URL(), request{Key: key})
			again := mustSend(t, c, p.URL(), request{Key: key})
			ex := up.onlyExecution(t, key)
			if first.Status != http.StatusCreated || first.Body != ex.Body || !again.Replayed() || again.Body != ex.Body {
				t.Errorf("keyed POST then retry: %s, %s; want 201 then its replay", first, again)
			}
		})
	}
}

func flagValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
