package admin

import (
	"encoding/json"
	"github.com/idempotency-proxy/idempotency-proxy/internal/adoption"
	"net/http"
	"strings"
	"testing"
	"time"
)

// GET /admin/report asks the proxy for the window given (24h without
// one), behind the token; a window that is not a duration is a 400 that
// says what it wants.
func TestReportIsServedBehindTheTokenForTheWindowAsked(t *testing.T) {
	var asked time.Duration
	report := func(w time.Duration) adoption.Report {
		asked = w
		return adoption.Report{Window: w.String(), Routes: []adoption.Route{{Route: "POST /v1/charges", Requests: 7}}}
	}
	e := newEnv(t, testToken, func(o *Options) { o.Report = report })
	if rec := e.do(t, "GET", "/admin/report", "", ""); rec.Code != http.StatusUnauthorized {
		t.Errorf("without the token: %d, want 401", rec.Code)
	}
	for _, tc := range []struct {
		query string
		want  time.Duration
	}{{"", 24 * time.Hour}, {"?window=90m", 90 * time.Minute}} {
		rec := e.do(t, "GET", "/admin/report"+tc.query, bearer, "")
		var got adoption.Report
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &got) != nil {
			t.Fatalf("GET /admin/report%s = %d %s, want 200 and a report", tc.query, rec.Code, rec.Body)
		}
		if asked != tc.want || len(got.Routes) != 1 || got.Routes[0].Requests != 7 {
			t.Errorf("GET /admin/report%s asked %s and answered %+v, want %s and the proxy's report", tc.query, asked, got, tc.want)
		}
	}
	for _, bad := range []string{"1day", "-1h", "0s"} {
		rec := e.do(t, "GET", "/admin/report?window="+bad, bearer, "")
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "positive duration") {
			t.Errorf("window=%s: %d %s, want 400 saying what a window is", bad, rec.Code, rec.Body)
		}
	}
	if got := e.ops(opReport, resultOK); got != 2 {
		t.Errorf("report ok counted %v, want 2", got)
	}
}

// Counts are kept per minute, so a window under a minute is refused with a
// 400 that names the smallest, never answered with a minute's counts; a
// minute is answered.
func TestReportWindowUnderAMinuteIsRefusedNamingTheSmallest(t *testing.T) {
	var asked time.Duration
	e := newEnv(t, testToken, func(o *Options) {
		o.Report = func(w time.Duration) adoption.Report { asked = w; return adoption.Report{Window: w.String()} }
	})
	for _, window := range []string{"30s", "59.999s", "1ns"} {
		rec := e.do(t, "GET", "/admin/report?window="+window, bearer, "")
		if rec.Code != http.StatusBadRequest {
			t.Errorf("window=%s: %d %s, want 400", window, rec.Code, rec.Body)
			continue
		}
		if p := problemOf(t, rec); p.Type != probBadRequest.Type || !strings.Contains(p.Detail, "smallest window is 1m0s") {
			t.Errorf("window=%s: problem %+v, want admin-bad-request naming 1m0s", window, p)
		}
	}
	if asked != 0 {
		t.Errorf("a refused window asked the proxy for %s", asked)
	}
	if rec := e.do(t, "GET", "/admin/report?window=1m", bearer, ""); rec.Code != http.StatusOK || asked != time.Minute {
		t.Errorf("window=1m: %d, asked %s; want 200 for a minute", rec.Code, asked)
	}
	if got := e.ops(opReport, resultBadRequest); got != 3 {
		t.Errorf("report bad_request counted %v, want 3", got)
	}
}
