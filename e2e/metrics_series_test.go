package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
)

// seriesOf counts the samples a scrape of m exposes: a histogram's every
// bucket (the text format's +Inf is one of them once parsed) and its _sum
// and _count.
func seriesOf(f *dto.MetricFamily, m *dto.Metric) int {
	if f.GetType() == dto.MetricType_HISTOGRAM {
		return len(m.GetHistogram().GetBucket()) + 2
	}
	return 1
}

// TestSeriesPerRouteAreAsDocumented scrapes the binary with three routes:
// every route label, default included, has the same number of
// idempotency_proxy_* series, the one docs/operating.md states, and the
// request duration histogram is split by result, not by outcome.
func TestSeriesPerRouteAreAsDocumented(t *testing.T) {
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "operating.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`each route label has (\d+) series`).FindSubmatch(doc)
	if m == nil {
		t.Fatal(`docs/operating.md does not say "each route label has N series"`)
	}
	documented, _ := strconv.Atoi(string(m[1]))

	up := startUpstream(t)
	p := startProxy(t, "proxy", proxyConfig{Upstream: up.URL(), Memory: true, Routes: []routeConfig{
		{Match: "POST /v1/charges"}, {Match: "POST /v1/refunds"}, {Match: "/v1/"},
	}})
	fams, err := scrape(p.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	perRoute := map[string]int{}
	results := map[string]bool{}
	for name, f := range fams {
		if !regexp.MustCompile(`^idempotency_proxy_`).MatchString(name) {
			continue
		}
		for _, metric := range f.GetMetric() {
			for _, l := range metric.GetLabel() {
				switch l.GetName() {
				case "route":
					perRoute[l.GetValue()] += seriesOf(f, metric)
				case "result":
					if name == "idempotency_proxy_request_duration_seconds" {
						results[l.GetValue()] = true
					}
				case "outcome":
					if name == "idempotency_proxy_request_duration_seconds" {
						t.Errorf("%s has an outcome label: 18 histograms a route", name)
					}
				}
			}
		}
	}
	t.Logf("idempotency_proxy_* series by route: %v", perRoute)
	if len(perRoute) != 4 {
		t.Errorf("route labels %v, want the three routes and default", perRoute)
	}
	for route, n := range perRoute {
		if n != documented {
			t.Errorf("route %q has %d idempotency_proxy_* series, docs/operating.md says %d", route, n, documented)
		}
	}
	if len(results) != 4 {
		t.Errorf("request duration results %v, want replayed, executed, forwarded, refused", results)
	}
}
