//go:build linux

package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
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
