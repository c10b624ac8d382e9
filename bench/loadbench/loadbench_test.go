//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
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

// The file builds on Linux only, where /proc is always there, so an
// unreadable one is a failure. The loop spins rather than waits: the CPU
// time it measures is its own.
func TestCPUTimeOfSelfGrows(t *testing.T) {
	before, err := cpuTime(os.Getpid())
	if err != nil {
		t.Fatalf("read this process's CPU time: %v", err)
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

func TestParseResponse(t *testing.T) {
	const ok = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nIdempotent-Replayed: true\r\nContent-Length: 5\r\n\r\nhello"
	tests := []struct {
		name    string
		in      string
		want    response
		size    int
		wantErr bool
	}{
		{"whole", ok, response{status: 200, replayed: true, length: 5}, len(ok), false},
		{"head only", ok[:len(ok)-5], response{}, 0, false},
		{"part of the body", ok[:len(ok)-1], response{}, 0, false},
		{"part of the head", ok[:20], response{}, 0, false},
		{"case-insensitive names, close", "HTTP/1.1 201 Created\r\ncontent-length: 0\r\nconnection: close\r\n\r\n", response{status: 201, close: true}, 62, false},
		{"no content", "HTTP/1.1 204 No Content\r\n\r\n", response{status: 204}, 27, false},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", response{}, 0, true},
		{"no length", "HTTP/1.1 200 OK\r\n\r\nhello", response{}, 0, true},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", response{}, 0, true},
		{"bad status line", "HTTP/1.1 2xx OK\r\nContent-Length: 0\r\n\r\n", response{}, 0, true},
		{"interim", "HTTP/1.1 100 Continue\r\n\r\n", response{}, 0, true},
		{"not HTTP", "SSH-2.0-OpenSSH\r\n\r\n", response{}, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, size, err := parseResponse([]byte(tc.in))
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Fatalf("parseResponse: error %v, want error: %v", err, tc.wantErr)
			}
			if err == nil && (got != tc.want || size != tc.size) {
				t.Errorf("parseResponse = %+v, %d; want %+v, %d", got, size, tc.want, tc.size)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		r       response
		want    expect
		wantErr error
	}{
		{response{status: 200}, fresh, nil},
		{response{status: 201, replayed: true}, replayed, nil},
		{response{status: 200, replayed: true}, anyReplay, nil},
		{response{status: 200}, anyReplay, nil},
		{response{status: 200}, replayed, errReplay},
		{response{status: 200, replayed: true}, fresh, errReplay},
	}
	for _, tc := range tests {
		if err := check(tc.r, "k", tc.want); !errors.Is(err, tc.wantErr) {
			t.Errorf("check(%+v, %v) = %v, want %v", tc.r, tc.want, err, tc.wantErr)
		}
	}
	if err := check(response{status: 409}, "k", anyReplay); err == nil {
		t.Error("check(409): no error")
	}
}

// fakeProxy answers like the proxy would: a key seen before is a replay,
// unless replays is false. It answers 400 to a body that is not the
// benchmark's, status to the rest, and closes every connection after its
// response when closeEach.
func fakeProxy(t *testing.T, status int, replays, closeEach bool) string {
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body bytes.Buffer
		_, _ = body.ReadFrom(r.Body)
		if !bytes.Equal(body.Bytes(), requestBody) {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if key := r.Header.Get("Idempotency-Key"); key != "" {
			mu.Lock()
			if seen[key] && replays {
				w.Header().Set("Idempotent-Replayed", "true")
			}
			seen[key] = true
			mu.Unlock()
		}
		if closeEach {
			w.Header().Set("Connection", "close")
		}
		w.WriteHeader(status)
		_, _ = w.Write(upstreamBody)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestLoaderRun(t *testing.T) {
	ctx := context.Background()
	l := &loader{runID: "test"}
	for _, closeEach := range []bool{false, true} {
		base := fakeProxy(t, http.StatusOK, true, closeEach)
		if err := l.warmHits(ctx, base, true); err != nil {
			t.Fatal(err)
		}
		for _, scen := range scenarios {
			got, err := l.run(ctx, base, true, scen, 4, 50*time.Millisecond)
			if err != nil {
				t.Fatalf("%s (close each: %v): %v", scen, closeEach, err)
			}
			if got.requests == 0 || len(got.latencies) != got.requests {
				t.Errorf("%s: %d requests, %d latencies; want the same, more than 0", scen, got.requests, len(got.latencies))
			}
		}
	}
	// The mixed scenario expects a replay of its retries; this server
	// replays nothing.
	base := fakeProxy(t, http.StatusOK, false, false)
	if _, err := l.run(ctx, base, true, mixed, 2, 50*time.Millisecond); !errors.Is(err, errReplay) {
		t.Errorf("mixed run against a server that never replays a retry: %v, want errReplay", err)
	}
	if _, err := l.run(ctx, base, false, mixed, 2, 50*time.Millisecond); err != nil {
		t.Errorf("mixed run against the plain proxy, which marks nothing: %v", err)
	}
	if _, err := l.run(ctx, fakeProxy(t, http.StatusConflict, true, false), true, noKey, 2, 50*time.Millisecond); err == nil {
		t.Error("run against a server answering 409: no error")
	}
}

func TestLoaderRunStopsOnCancel(t *testing.T) {
	base := fakeProxy(t, http.StatusOK, true, false)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err := (&loader{runID: "test"}).run(ctx, base, true, noKey, 2, time.Hour)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("run after cancel: %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("run took %s after its context was cancelled", d)
	}
}

func TestLoaderRunRefusedConnection(t *testing.T) {
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&loader{runID: "test"}).run(context.Background(), "http://"+addr, true, noKey, 1, time.Second); err == nil {
		t.Error("run against a closed port: no error")
	}
}

// TestFloorAnswersLikeAReplay checks that the replay floor passes the hit
// scenario's checks, and only those: it is measured on hits alone.
func TestFloorAnswersLikeAReplay(t *testing.T) {
	srv := httptest.NewServer(constantHandler(true))
	t.Cleanup(srv.Close)
	l := &loader{runID: "test"}
	if _, err := l.run(context.Background(), srv.URL, true, hit, 2, 50*time.Millisecond); err != nil {
		t.Errorf("hit run against the floor: %v", err)
	}
	if _, err := l.run(context.Background(), srv.URL, true, miss, 2, 50*time.Millisecond); !errors.Is(err, errReplay) {
		t.Errorf("miss run against the floor: %v, want errReplay", err)
	}
	if (target{name: "floor"}).serves(miss) || !(target{name: "floor"}).serves(hit) || !(target{name: "memory"}).serves(miss) {
		t.Error("serves: the floor must take part in the hit scenario only, the others in all")
	}
}
