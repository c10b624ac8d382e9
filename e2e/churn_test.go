package e2e

import (
	"fmt"
	"testing"
)

// mKeyChurn counts requests sent again under a fresh key
// (docs/operating.md#metrics).
const mKeyChurn = "idempotency_proxy_key_churn_total"

// TestKeyChurnCountsClientsThatMintAKeyPerAttempt has, on a route in each
// mode, one client retry each request three times with its key, and
// another retry it three times under a fresh key each time: only the
// second client's retries are counted.
func TestKeyChurnCountsClientsThatMintAKeyPerAttempt(t *testing.T) {
	for _, mode := range []string{"enforce", "shadow"} {
		t.Run(mode, func(t *testing.T) {
			up := startUpstream(t)
			cfg := baseConfig(up, "")
			cfg.Memory = true
			cfg.Routes = []routeConfig{{Match: "POST /v1/charges", Keys: map[string]string{"mode": mode}}}
			p := startProxy(t, "churn-"+mode, cfg)
			const requests, attempts = 4, 3
			for i := range requests {
				for a := range attempts {
					good := shadowCase{key: fmt.Sprintf("good-%d", i), body: fmt.Sprintf(`{"good":%d}`, i)}
					good.answer(t, p.URL())
					churner := shadowCase{key: fmt.Sprintf("churn-%d-%d", i, a), body: fmt.Sprintf(`{"churn":%d}`, i)}
					churner.answer(t, p.URL())
				}
			}
			labels := map[string]string{"route": "POST /v1/charges"}
			if got, want := metricSum(t, mKeyChurn, labels, p), float64(requests*(attempts-1)); got != want {
				t.Errorf("%s = %v, want %v: the churning client's retries, not the other's", mKeyChurn, got, want)
			}
		})
	}
}
