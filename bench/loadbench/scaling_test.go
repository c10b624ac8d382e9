//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sizedServer answers every POST with a body of n bytes.
func sizedServer(t *testing.T, n int) string {
	t.Helper()
	body := bodyOfSize(n)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestUpstreamServesTheBodySizeAsked(t *testing.T) {
	srv := httptest.NewServer(constantHandler(false))
	t.Cleanup(srv.Close)
	for _, n := range []int{minSizedBody, 200, 16 << 10, 1 << 20} {
		resp, err := http.Post(srv.URL+"/v1/charges?bytes="+strconv.Itoa(n), "application/json", bytes.NewReader(requestBody))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || len(b) != n || resp.ContentLength != int64(n) {
			t.Errorf("bytes=%d: got %d bytes, Content-Length %d (%v)", n, len(b), resp.ContentLength, err)
		}
		if !json.Valid(b) {
			t.Errorf("bytes=%d: body is not JSON", n)
		}
	}
	for _, bad := range []string{"x", "-1", "15", strconv.Itoa(maxSizedBody + 1)} {
		resp, err := http.Post(srv.URL+"/v1/charges?bytes="+bad, "application/json", bytes.NewReader(requestBody))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("bytes=%s: status %d, want 400", bad, resp.StatusCode)
		}
	}
}

// TestLargeBodiesAreCountedNotBuffered drives 1 MiB responses and checks
// that no connection kept more than a response head's worth of buffer.
func TestLargeBodiesAreCountedNotBuffered(t *testing.T) {
	const n = 1 << 20
	base := sizedServer(t, n)
	sources := []*keySource{{scen: noKey}, {scen: noKey}, {scen: noKey}}
	d, err := newDriver(base, defaultPath, sources)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	d.bodyLen, d.limit = n, 30
	lat, err := d.run(context.Background(), time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(lat) < 30 {
		t.Errorf("%d responses, want at least 30", len(lat))
	}
	for i, c := range d.conns {
		if cap(c.in) > 2*maxHead {
			t.Errorf("connection %d buffered %d bytes for %d-byte responses", i, cap(c.in), n)
		}
	}
}

func TestBodyOfTheWrongLengthFailsTheRun(t *testing.T) {
	l := &loader{runID: "test", bodyLen: 300}
	_, err := l.run(context.Background(), sizedServer(t, 200), false, noKey, 2, 2*time.Second)
	if err == nil || !strings.Contains(err.Error(), "body of 200 bytes, want 300") {
		t.Errorf("run expecting 300-byte bodies against 200-byte ones: %v", err)
	}
}

// TestCountBoundEndsARun: a run with a request bound ends when it is
// reached, long before its time is up.
func TestCountBoundEndsARun(t *testing.T) {
	l := &loader{runID: "test", limit: 20}
	got, err := l.run(context.Background(), sizedServer(t, 200), false, noKey, 4, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Each connection finishes the request it has in flight.
	if got.requests < 20 || got.requests > 20+4 {
		t.Errorf("%d requests, want 20 to 24", got.requests)
	}
}

// TestLoaderHandles1024Connections runs the largest concurrency --scaling
// uses against a local server.
func TestLoaderHandles1024Connections(t *testing.T) {
	if err := raiseFileLimit(maxConc + 256 + maxConc); err != nil { // the server's side too
		t.Skipf("not enough file descriptors here: %v", err)
	}
	l := &loader{runID: "test", limit: 3 * maxConc}
	got, err := l.run(context.Background(), sizedServer(t, 200), false, noKey, maxConc, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got.requests < 3*maxConc {
		t.Errorf("%d requests over %d connections, want at least %d", got.requests, maxConc, 3*maxConc)
	}
}

func TestRaiseFileLimitRefusesBeyondTheHardLimit(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Max == ^uint64(0) {
		t.Skip("no hard limit on open files")
	}
	if err := raiseFileLimit(lim.Max + 1); err == nil || !strings.Contains(err.Error(), "ulimit -Hn") {
		t.Errorf("raiseFileLimit(hard+1) = %v, want an error naming ulimit -Hn", err)
	}
	if err := raiseFileLimit(1); err != nil {
		t.Errorf("raiseFileLimit(1) = %v", err)
	}
}

func TestParseScaling(t *testing.T) {
	sc, err := parseScaling("1020KiB, 200,16KiB,256KiB", "1,32,256,1024")
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{200, 16 << 10, 256 << 10, 1020 << 10}; !slices.Equal(sc.bodies, want) {
		t.Errorf("bodies = %v, want %v", sc.bodies, want)
	}
	// Sizes at 32 clients, then clients at 200 B; 200 B at 32 once.
	want := []point{{200, 32}, {16 << 10, 32}, {256 << 10, 32}, {1020 << 10, 32}, {200, 1}, {200, 256}, {200, 1024}}
	if got := sc.points(); !slices.Equal(got, want) {
		t.Errorf("points = %v, want %v", got, want)
	}
	for _, bad := range [][2]string{{"2MiB", "1"}, {"1MiB", "1"}, {"8", "1"}, {"1GiB", "1"}, {"x", "1"}, {"200", "2048"}} {
		if _, err := parseScaling(bad[0], bad[1]); err == nil {
			t.Errorf("parseScaling(%q, %q): no error", bad[0], bad[1])
		}
	}
}

func TestFmtSize(t *testing.T) {
	for n, want := range map[int]string{200: "200 B", 16 << 10: "16 KiB", 1 << 20: "1 MiB", 1500: "1500 B"} {
		if got := fmtSize(n); got != want {
			t.Errorf("fmtSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestReportShowsTheTailRatio(t *testing.T) {
	rep := &report{concs: []int{32}, targets: []string{"plain"}, rounds: map[cellKey][]round{
		{32, hit, "plain"}: {{rate: 1000, p50: 100 * time.Microsecond, p99: 400 * time.Microsecond}},
	}}
	var out bytes.Buffer
	rep.write(&out)
	lines := strings.Split(out.String(), "\n")
	head, row := fields(lines[0]), fields(lines[1])
	i := slices.Index(head, "p99/p50")
	if i < 0 || len(row) <= i || row[i] != "4.0" {
		t.Errorf("p99/p50 column: header %q, row %q; want 4.0", head, row)
	}
}

// fields splits a table line on its column separators.
func fields(line string) []string {
	var out []string
	for f := range strings.SplitSeq(line, "|") {
		out = append(out, strings.TrimSpace(f))
	}
	return out
}

// TestBadFlagsExitWithUsageStatus: a mistyped flag value stops the run
// before anything starts, with status 2 and the reason.
func TestBadFlagsExitWithUsageStatus(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--layout", "spread"}, `unknown layout "spread"`},
		{[]string{"--scaling", "--bodies", "2MiB"}, "--bodies"},
		{[]string{"--scaling", "--scaling-concurrency", "2048"}, "--scaling-concurrency"},
		{[]string{"--footprint", "--records", "0"}, "--records"},
		{[]string{"--concurrency", "0"}, "bad concurrency"},
	}
	for _, tc := range tests {
		var stderr bytes.Buffer
		if got := run(tc.args, io.Discard, &stderr); got != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("run(%q) = %d, stderr %q; want 2 and %q", tc.args, got, stderr.String(), tc.want)
		}
	}
}
