package client

import (
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	tests := []struct {
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"0", 0, true},
		{"2", 2 * time.Second, true},
		{" 120 ", 120 * time.Second, true},
		{"99999999999999", 24 * time.Hour, true},
		{now.Add(3 * time.Second).Format(http.TimeFormat), 3 * time.Second, true},
		{"Sunday, 29-Nov-26 08:00:05 GMT", 5 * time.Second, true}, // RFC 850, still accepted
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, true},
		{"-1", 0, false},
		{"soon", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseRetryAfter(tt.in, now)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestDelay(t *testing.T) {
	// jitter returns the largest value it may (n-1), so the ceiling shows.
	c := &Client{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second, jitter: func(n int64) int64 { return n - 1 }}
	tests := []struct {
		name    string
		attempt int
		result  attemptResult
		want    time.Duration
	}{
		{"first retry", 1, attemptResult{}, 100*time.Millisecond - 1},
		{"doubles", 3, attemptResult{}, 400*time.Millisecond - 1},
		{"capped by MaxDelay", 5, attemptResult{}, time.Second - 1},
		{"huge attempt does not overflow", 200, attemptResult{}, time.Second - 1},
		{"Retry-After honoured", 1, attemptResult{retryAfter: 700 * time.Millisecond, hasRetryAfter: true}, 700 * time.Millisecond},
		{"Retry-After capped", 1, attemptResult{retryAfter: time.Minute, hasRetryAfter: true}, time.Second},
		{"Retry-After zero", 4, attemptResult{retryAfter: 0, hasRetryAfter: true}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := c.delay(tt.attempt, tt.result); got != tt.want {
				t.Errorf("delay(%d) = %v, want %v", tt.attempt, got, tt.want)
			}
		})
	}
}

func TestDelayJitterIsWithinCeiling(t *testing.T) {
	c := &Client{BaseDelay: 10 * time.Millisecond, MaxDelay: 80 * time.Millisecond}
	for n := 1; n <= 10; n++ {
		ceiling := min(10*time.Millisecond<<(n-1), 80*time.Millisecond)
		for range 100 {
			if d := c.delay(n, attemptResult{}); d < 0 || d >= ceiling {
				t.Fatalf("delay(%d) = %v, want in [0, %v)", n, d, ceiling)
			}
		}
	}
}

func TestDelayDefaults(t *testing.T) {
	var c Client
	c.jitter = func(n int64) int64 { return n - 1 }
	if got, want := c.delay(1, attemptResult{}), DefaultBaseDelay-1; got != want {
		t.Errorf("delay(1) = %v, want %v", got, want)
	}
	if got, want := c.delay(30, attemptResult{}), DefaultMaxDelay-1; got != want {
		t.Errorf("delay(30) = %v, want %v", got, want)
	}
}

// An HTTP-date is read as at most a day away, as delta-seconds are: a
// caller's MaxDelay above that still waits no longer on a date decades off.
func TestRetryAfterDateIsAtMostADayAway(t *testing.T) {
	now := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	for _, at := range []time.Time{now.Add(48 * time.Hour), now.AddDate(100, 0, 0)} {
		if got, ok := parseRetryAfter(at.Format(http.TimeFormat), now); got != 24*time.Hour || !ok {
			t.Errorf("Retry-After %s: %v, %v; want 24h, true", at.Format(http.TimeFormat), got, ok)
		}
	}
}
