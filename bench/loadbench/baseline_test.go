//go:build linux

package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/proxy"
)

// TestPlainIsAStockTunedReverseProxy: the baseline's server is a stock
// http.Server, and its proxy has the product's transport settings and a
// BufferPool, nothing more. A setting added here lowers the floor every
// ratio is measured against.
func TestPlainIsAStockTunedReverseProxy(t *testing.T) {
	h := http.NewServeMux()
	if got := plainServer(h); !reflect.DeepEqual(got, &http.Server{Handler: h}) {
		t.Errorf("plain server %+v, want a stock http.Server with only its handler", got)
	}
	rp := plainProxy(&url.URL{Scheme: "http", Host: "127.0.0.1:1"})
	tr, ok := rp.Transport.(*http.Transport)
	if !ok {
		t.Fatalf("plain proxy transport %T, want *http.Transport", rp.Transport)
	}
	want := proxy.NewTransport()
	if tr.DialContext == nil {
		t.Error("plain proxy transport has no DialContext; the product's dials with its own timeouts")
	}
	// Functions compare equal only when nil: the dialer's settings are the
	// product's by construction, everything else must match field by field.
	tr.DialContext, want.DialContext = nil, nil
	if !reflect.DeepEqual(tr, want) {
		t.Errorf("plain proxy transport %+v, want the product's %+v", tr, want)
	}
	if rp.BufferPool == nil || len(rp.BufferPool.Get()) != 32<<10 {
		t.Error("plain proxy: want a BufferPool of 32 KiB buffers")
	}
	if rp.ModifyResponse != nil || rp.ErrorHandler != nil || rp.Director != nil || rp.FlushInterval != 0 {
		t.Error("plain proxy: only Rewrite, Transport and BufferPool may be set")
	}
}

// TestPlainForwardsEveryScenario: the baseline passes the load generator's
// checks on each scenario through a real upstream.
func TestPlainForwardsEveryScenario(t *testing.T) {
	up := httptest.NewServer(constantHandler(false))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	srv := httptest.NewUnstartedServer(plainProxy(u))
	srv.Config = plainServer(srv.Config.Handler)
	srv.Start()
	t.Cleanup(srv.Close)
	l := &loader{runID: "test"}
	for _, scen := range scenarios {
		if _, err := l.run(context.Background(), srv.URL, false, scen, 2, 50*time.Millisecond); err != nil {
			t.Errorf("%s through the plain proxy: %v", scen, err)
		}
	}
}

// TestReportFlagsANoKeyRatioAboveTheFloor: a product target that forwards
// no-key traffic faster than the plain proxy by more than 2% is reported as
// a wrong baseline, loudly and in its row, not as a goal met.
func TestReportFlagsANoKeyRatioAboveTheFloor(t *testing.T) {
	for _, tc := range []struct {
		rateX float64
		loud  bool
	}{{1.05, true}, {1.02, false}, {0.97, false}} {
		rep := &report{concs: []int{32}, targets: []string{"plain", "redis", "fiber-redis"}, rounds: map[cellKey][]round{
			{32, noKey, "plain"}: {{rate: 1000, rateX: 1, cpuX: 1}},
			{32, noKey, "redis"}: {{rate: 1000 * tc.rateX, rateX: tc.rateX, cpuX: 1}},
			// A peer on another HTTP stack may well beat a net/http floor.
			{32, noKey, "fiber-redis"}: {{rate: 3000, rateX: 3, cpuX: 0.3}},
		}}
		var out bytes.Buffer
		rep.write(&out)
		s := out.String()
		if got := strings.Count(s, "BASELINE IS NOT THE FLOOR"); got != map[bool]int{true: 1, false: 0}[tc.loud] {
			t.Errorf("no-key ratio %.2f: %d warning lines, want loud=%v\n%s", tc.rateX, got, tc.loud, s)
		}
		if tc.loud && (!strings.HasPrefix(s, "BASELINE IS NOT THE FLOOR: redis") || !strings.Contains(s, "BASELINE?")) {
			t.Errorf("no-key ratio %.2f: want the warning first and the row marked, got\n%s", tc.rateX, s)
		}
		if !tc.loud && strings.Contains(s, "BASELINE?") {
			t.Errorf("no-key ratio %.2f: row marked as a wrong baseline\n%s", tc.rateX, s)
		}
	}
}

// TestReportShowsTheIdempotencyTax: each target's tax is its scenario's
// proxy CPU minus its own no-key CPU, for peers as for the product.
func TestReportShowsTheIdempotencyTax(t *testing.T) {
	rep := &report{concs: []int{32}, targets: []string{"plain", "memory", "fiber-memory"}, rounds: map[cellKey][]round{
		{32, noKey, "plain"}:        {{rate: 1000, cpu: 45}},
		{32, noKey, "memory"}:       {{rate: 1000, cpu: 50, rateX: 1}},
		{32, miss, "memory"}:        {{rate: 800, cpu: 68.5, rateX: 0.8}},
		{32, hit, "memory"}:         {{rate: 4000, cpu: 16, rateX: 4}},
		{32, noKey, "fiber-memory"}: {{rate: 2500, cpu: 14.5, rateX: 2.5}},
		{32, miss, "fiber-memory"}:  {{rate: 2000, cpu: 19.5, rateX: 2}},
	}}
	var out bytes.Buffer
	rep.write(&out)
	_, tax, ok := strings.Cut(out.String(), "idempotency tax")
	if !ok {
		t.Fatalf("no tax table:\n%s", out.String())
	}
	want := map[string][]string{
		"memory":       {"32", "memory", "+18.5", "-34.0", "–", "50.0"},
		"fiber-memory": {"32", "fiber-memory", "+5.0", "–", "–", "14.5"},
	}
	seen := 0
	for _, line := range strings.Split(tax, "\n") {
		f := fields(line)
		if len(f) < 2 {
			continue
		}
		if w, ok := want[f[1]]; ok {
			seen++
			if !slices.Equal(f[:len(w)], w) {
				t.Errorf("tax row %q, want %q", f, w)
			}
		}
		if f[1] == "plain" {
			t.Error("the plain proxy has no tax row")
		}
	}
	if seen != 2 {
		t.Errorf("%d tax rows, want 2:\n%s", seen, tax)
	}
}

func TestParsePeers(t *testing.T) {
	if got, err := parsePeers(""); err != nil || len(got) != 0 {
		t.Errorf(`parsePeers("") = %v, %v; want none`, got, err)
	}
	if got, err := parsePeers("fiber, fiber"); err != nil || !slices.Equal(got, []string{"fiber"}) {
		t.Errorf(`parsePeers("fiber, fiber") = %v, %v; want [fiber]`, got, err)
	}
	if _, err := parsePeers("nginx"); err == nil || !strings.Contains(err.Error(), `unknown peer "nginx"`) {
		t.Errorf(`parsePeers("nginx"): %v, want an unknown peer`, err)
	}
}
