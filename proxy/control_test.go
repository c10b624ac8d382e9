package proxy

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestUpstreamNoStoreIsReadAndTheHeaderRemoved(t *testing.T) {
	tests := []struct {
		name   string
		values []string
		want   bool
	}{
		{"no-store", []string{"no-store"}, true},
		{"case", []string{"No-Store"}, true},
		{"in a list", []string{"foo, no-store ,bar"}, true},
		{"second line", []string{"foo", "no-store"}, true},
		{"with a value", []string{"no-store=1"}, true},
		{"with parameters", []string{"no-store; reason=quota"}, true},
		{"other token", []string{"no-cache"}, false},
		{"prefix only", []string{"no-store-please"}, false},
		{"empty", []string{""}, false},
		{"quoted", []string{`"no-store"`}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{"Idempotency-Control": tc.values, "Content-Type": {"text/plain"}}
			if got := takeUpstreamControl(h, "Idempotency-Control"); got != tc.want {
				t.Errorf("no-store = %v, want %v", got, tc.want)
			}
			if _, ok := h["Idempotency-Control"]; ok {
				t.Error("the control header was left for the client")
			}
			if h.Get("Content-Type") != "text/plain" {
				t.Error("another header was removed")
			}
		})
	}
}

func TestUpstreamControlHeaderIsConfigurable(t *testing.T) {
	h := http.Header{"X-Proxy-Control": {"no-store"}, "Idempotency-Control": {"no-store"}}
	p := DefaultPolicy()
	p.UpstreamControlHeader = "x-proxy-control"
	rt := newRoute(defaultRoute, false, p, NewMetrics(prometheus.NewRegistry(), ""))
	if !takeUpstreamControl(h, rt.policy.UpstreamControlHeader) {
		t.Error("a configured name written in lower case was not found")
	}
	if _, ok := h["X-Proxy-Control"]; ok {
		t.Error("a configured name written in lower case was left for the client")
	}
	if h["Idempotency-Control"] == nil {
		t.Error("the default header was removed although another is configured")
	}
	if takeUpstreamControl(h, "") || h["Idempotency-Control"] == nil {
		t.Error("an empty name did not disable upstream control")
	}
}

func TestExpiresIsCreationPlusTTLRoundedDown(t *testing.T) {
	created := time.Date(2026, 11, 30, 9, 59, 59, 900_000_000, time.FixedZone("CET", 3600))
	if got, want := expiresValue(created, 24*time.Hour), "Tue, 01 Dec 2026 08:59:59 GMT"; got != want {
		t.Errorf("Idempotency-Expires = %q, want %q", got, want)
	}
	if _, err := http.ParseTime(expiresValue(time.Now(), time.Hour)); err != nil {
		t.Errorf("not an HTTP-date: %v", err)
	}
}

func TestCheckUpstreamControlHeader(t *testing.T) {
	for _, ok := range []string{"", "Idempotency-Control", "x-control"} {
		if err := CheckUpstreamControlHeader(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"Idempotency Control", "a:b", "é"} {
		if err := CheckUpstreamControlHeader(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
