package proxy

import (
	"net/http"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/lograte"
	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution/executiontest"
)

// While the store is down every keyed request fails to take its key, and
// the warning says so once a period, not once a request: the next one
// after the period counts the ones left out. Each request keeps its own
// access line, with its outcome and key_hash.
func TestStoreDownIsWarnedOnceAPeriodNotPerRequest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy func(*Policy)
		msg    string
	}{
		{"fail closed", func(p *Policy) { p.OnStoreError = FailClosed }, "store unavailable, rejecting request"},
		{"fail open", func(p *Policy) { p.OnStoreError = FailOpen }, "store unavailable, forwarding without idempotency protection"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs lockedBuffer
			st := newFlaky(t)
			e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {}, withStore(st), withLog(&logs), withAccessLog, withPolicy(tc.policy))
			clock := executiontest.NewFakeClock()
			e.handler.clock = clock
			st.down.Store(true)
			const n = 20
			for range n {
				e.do(t, "POST", "/x", "k", "{}")
			}
			if got := len(logs.lines(t, tc.msg)); got != 1 {
				t.Fatalf("%d %q lines for %d requests in one period, want 1", got, tc.msg, n)
			}
			if got := len(logs.lines(t, "access")); got != n {
				t.Errorf("%d access lines, want one a request: %d", got, n)
			}
			clock.Advance(lograte.Period)
			e.do(t, "POST", "/x", "k", "{}")
			lines := logs.lines(t, tc.msg)
			if len(lines) != 2 || lines[1]["suppressed"] != float64(n-1) {
				t.Errorf("after the period: lines %v, want a second one with suppressed %d", lines, n-1)
			}
		})
	}
}
