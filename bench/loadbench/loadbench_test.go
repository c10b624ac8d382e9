package main

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	tests := []struct {
		name string
		in   []float64
		want stat
	}{
		{"odd", []float64{3, 1, 2}, stat{2, 1, 3}},
		{"even", []float64{4, 1, 3, 2}, stat{2.5, 1, 4}},
		{"one", []float64{7}, stat{7, 7, 7}},
		{"NaN skipped", []float64{math.NaN(), 5, 1}, stat{3, 1, 5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := summarize(tc.in); got != tc.want {
				t.Errorf("summarize(%v) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
	if got := summarize(nil); !math.IsNaN(got.med) {
		t.Errorf("summarize(nil).med = %v, want NaN", got.med)
	}
}

func TestPercentile(t *testing.T) {
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[i] = time.Duration(100-i) * time.Microsecond // 100µs … 1µs
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 50 * time.Microsecond}, {0.99, 99 * time.Microsecond}, {1, 100 * time.Microsecond}, {0.001, time.Microsecond}} {
		if got := percentile(ds, tc.p); got != tc.want {
			t.Errorf("percentile(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile(nil) = %v, want 0", got)
	}
}

func TestParseStat(t *testing.T) {
	// The command name may hold spaces and parentheses; utime=250, stime=50 ticks.
	line := "4242 (idem (proxy) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 8 0 100 0 0"
	got, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if want := 3 * time.Second; got != want {
		t.Errorf("parseStat = %v, want %v", got, want)
	}
	if _, err := parseStat("garbage"); err == nil {
		t.Error("parseStat(garbage): no error")
	}
}

func TestParseSchedstat(t *testing.T) {
	got, err := parseSchedstat("123456789 2000 31\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := 123456789 * time.Nanosecond; got != want {
		t.Errorf("parseSchedstat = %v, want %v", got, want)
	}
}

func TestCPUTimeOfSelfGrows(t *testing.T) {
	before, err := cpuTime(os.Getpid())
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if now, _ := cpuTime(os.Getpid()); now-before > 20*time.Millisecond {
			return
		}
	}
	t.Error("cpuTime did not grow while this test spun for 5 s")
}

func TestIsClientCommand(t *testing.T) {
	tests := []struct {
		line string
		want bool
	}{
		{`+1718000000.123456 [0 127.0.0.1:50000] "SET" "idem:{k}" "x" "NX" "PX" "30000"`, true},
		{`+1718000000.123456 [0 127.0.0.1:50000] "evalsha" "abc" "1" "idem:{k}"`, true},
		{`+1718000000.123456 [0 lua] "SET" "idem:{k}" "x"`, false},
		{`+1718000000.123456 [0 127.0.0.1:50000] "hello" "3"`, false},
		{`+1718000000.123456 [0 127.0.0.1:50000] "client" "setinfo" "LIB-NAME" "go-redis"`, false},
		{`+OK`, false},
	}
	for _, tc := range tests {
		if got := isClientCommand(tc.line); got != tc.want {
			t.Errorf("isClientCommand(%q) = %v, want %v", tc.line, got, tc.want)
		}
	}
}

func TestParseConcs(t *testing.T) {
	got, err := parseConcs("1, 32")
	if err != nil || len(got) != 2 || got[0] != 1 || got[1] != 32 {
		t.Errorf(`parseConcs("1, 32") = %v, %v; want [1 32]`, got, err)
	}
	for _, bad := range []string{"", "0", "x", "1,,2", "5000"} {
		if _, err := parseConcs(bad); err == nil {
			t.Errorf("parseConcs(%q): no error", bad)
		}
	}
}

// TestClientChecksResponses runs the raw client against a server that
// answers like the proxy: it must count a replay where an execution was
// due, and a non-2xx, as errors.
func TestClientChecksResponses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body bytes.Buffer
		_, _ = body.ReadFrom(r.Body)
		if !bytes.Equal(body.Bytes(), requestBody) {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		switch key := r.Header.Get("Idempotency-Key"); {
		case key == "fail":
			w.WriteHeader(http.StatusConflict)
		case strings.HasPrefix(key, "old"):
			w.Header().Set("Idempotent-Replayed", "true")
		}
		_, _ = w.Write(upstreamBody)
	}))
	t.Cleanup(srv.Close)

	tests := []struct {
		key     string
		want    expect
		wantErr bool
	}{
		{"new-1", fresh, false},
		{"old-1", replayed, false},
		{"", fresh, false},
		{"old-2", anyReplay, false},
		{"new-2", replayed, true},
		{"old-3", fresh, true},
		{"fail", anyReplay, true},
	}
	c, err := newClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	for _, tc := range tests {
		err := c.do(context.Background(), tc.key, tc.want)
		if gotErr := err != nil; gotErr != tc.wantErr {
			t.Errorf("do(%q, %v) = %v, want error: %v", tc.key, tc.want, err, tc.wantErr)
		}
		if tc.key == "new-2" && !errors.Is(err, errReplay) {
			t.Errorf("do(new-2) = %v, want errReplay", err)
		}
	}
}

func TestLoaderRun(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(upstreamBody)
	}))
	t.Cleanup(srv.Close)
	l := &loader{runID: "test"}
	got, err := l.run(context.Background(), srv.URL, false, mixed, 4, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if got.requests == 0 || len(got.latencies) != got.requests {
		t.Errorf("run: %d requests, %d latencies; want the same, more than 0", got.requests, len(got.latencies))
	}
	// A proxy target must replay hits; this server never does.
	if _, err := l.run(context.Background(), srv.URL, true, hit, 2, 50*time.Millisecond); !errors.Is(err, errReplay) {
		t.Errorf("hit run against a server that never replays: %v, want errReplay", err)
	}
}
