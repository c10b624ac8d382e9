package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metric names documented in docs/operating.md#metrics the tests assert on.
const (
	mRequests = "idempotency_proxy_requests_total"
	mLockLost = "idempotency_proxy_lock_lost_total"
)

// scrape fetches and parses a proxy's /metrics.
func scrape(adminURL string) (map[string]*dto.MetricFamily, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	resp, err := c.Get(adminURL + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// metricSum is the sum of the counter or gauge samples of name whose labels
// include every pair in labels, over all the given proxies.
func metricSum(t testing.TB, name string, labels map[string]string, proxies ...*proxyProc) float64 {
	t.Helper()
	var sum float64
	for _, p := range proxies {
		fams, err := scrape(p.AdminURL())
		if err != nil {
			t.Fatalf("scrape proxy %s: %v", p.name, err)
		}
		sum += familySum(fams[name], labels)
	}
	return sum
}

func familySum(f *dto.MetricFamily, labels map[string]string) float64 {
	if f == nil {
		return 0
	}
	var sum float64
	for _, m := range f.GetMetric() {
		if !hasLabels(m, labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		}
	}
	return sum
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

// outcome is the label set of one outcome of idempotency_proxy_requests_total.
func outcome(o string) map[string]string { return map[string]string{"outcome": o} }
