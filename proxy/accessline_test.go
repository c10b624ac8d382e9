package proxy

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// slogAccessLine is the access line as the process's slog JSON handler
// writes the same record: what operators' parsers and the docs describe.
func slogAccessLine(t testing.TB, now time.Time, q *request, outcome Outcome, status int, d time.Duration) []byte {
	var buf bytes.Buffer
	rec := slog.NewRecord(now, slog.LevelInfo, "access", 0)
	rec.AddAttrs(
		slog.String("method", q.in.Method), slog.String("path", q.in.URL.Path),
		slog.String("route", q.route.label), slog.Int("status", status),
		slog.String("outcome", string(outcome)), slog.Float64("duration_seconds", d.Seconds()),
		slog.Int64("bytes", q.sentBytes), slog.String("key_hash", q.keyHash))
	if err := slog.NewJSONHandler(&buf, nil).Handle(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func accessRequest(method, path, label, keyHash string, sent int64) *request {
	return &request{
		in:        &http.Request{Method: method, URL: &url.URL{Path: path}},
		route:     &route{label: label},
		keyHash:   keyHash,
		sentBytes: sent,
	}
}

// The access line is written by hand, not by slog: byte for byte it is the
// line slog's JSON handler writes for the same record, whatever the path
// holds (quotes, control characters, invalid UTF-8, JSONP's separators)
// and however long the request took.
func TestAccessLineIsTheJSONHandlersLine(t *testing.T) {
	now := time.Date(2026, 12, 3, 13, 4, 5, 678901234, time.FixedZone("X", 3600))
	paths := []string{"/v1/charges", "", `/a"b\c`, "/tab\tnl\ncr\r", "/ctl\x00\x01\x1f\x7f", "/<script>&amp;",
		"/bad\xff\xfeutf8", "/sep\u2028\u2029", "/é/日本/🙂", "/%2F"}
	durations := []time.Duration{0, 1, 999, time.Microsecond, 1001, 1234567, 100 * time.Millisecond, time.Second - 1, time.Second,
		3 * time.Second, 1500 * time.Millisecond, 90 * time.Minute, math.MaxInt64, -time.Millisecond}
	for _, p := range paths {
		for _, d := range durations {
			q := accessRequest("POST", p, "POST /v1/"+p, "3f2a1b9c0d4e5f60718293a4b5c6d7e8", 199)
			got := appendAccessLine(nil, now, q, OutcomeReplayed, 201, d)
			if want := slogAccessLine(t, now, q, OutcomeReplayed, 201, d); !bytes.Equal(got, want) {
				t.Errorf("path %q, duration %d:\n got %s\nwant %s", p, d, got, want)
			}
		}
	}
	for _, at := range []time.Time{now.Truncate(time.Second), now.Add(-678 * time.Millisecond).UTC(),
		now.Truncate(time.Second).Add(500 * time.Millisecond), now.Truncate(time.Second).Add(1), now.Add(time.Hour), now.In(time.Local), now} {
		q := accessRequest("GET", "/", defaultRoute, "", 0)
		if got, want := appendAccessLine(nil, at, q, OutcomePassthrough, 200, time.Millisecond), slogAccessLine(t, at, q, OutcomePassthrough, 200, time.Millisecond); !bytes.Equal(got, want) {
			t.Errorf("time %v:\n got %s\nwant %s", at, got, want)
		}
	}
}

func FuzzAccessLineIsTheJSONHandlersLine(f *testing.F) {
	f.Add("POST", "/v1/charges", "default", "3f2a", int64(199), int64(1234567), 201, int64(0))
	f.Add("GE\"T", "/\xff\u2028", "r\\", "", int64(-1), int64(1), 0, int64(5e8))
	base := time.Date(2026, 12, 3, 13, 4, 5, 678901234, time.FixedZone("X", -5400))
	f.Fuzz(func(t *testing.T, method, path, route, keyHash string, sent, d int64, status int, at int64) {
		now := base.Add(time.Duration(at % (1 << 50)))
		q := accessRequest(method, path, route, keyHash, sent)
		got := appendAccessLine(nil, now, q, Outcome(route), status, time.Duration(d))
		if want := slogAccessLine(t, now, q, Outcome(route), status, time.Duration(d)); !bytes.Equal(got, want) {
			t.Errorf("\n got %s\nwant %s", got, want)
		}
	})
}

// Under a second the duration is written from its nanoseconds, not as a
// float: the digits are encoding/json's for every duration tried, a
// million spread over the range and its edges.
func TestAccessLineSecondsAreTheFloatsDigits(t *testing.T) {
	check := func(d time.Duration) {
		if got, want := appendSeconds(nil, d), appendJSONFloat(nil, d.Seconds()); !bytes.Equal(got, want) {
			t.Fatalf("duration %d ns: %s, want %s", d, got, want)
		}
	}
	for d := time.Duration(0); d < 3*time.Microsecond; d++ {
		check(d)
	}
	for d := time.Second - 3*time.Microsecond; d < time.Second+3*time.Microsecond; d++ {
		check(d)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1_000_000 {
		check(time.Duration(rng.Int64N(int64(time.Second))))
	}
}

// The access line costs no allocation: a replay allocates as much with the
// access log on as with it off.
func TestAccessLineAddsNoAllocation(t *testing.T) {
	if raceEnabled() {
		t.Skip("the race detector drops sync.Pool items and adds allocations")
	}
	const key = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	allocs := func(opts ...envOption) float64 {
		rig := newBenchRig(t, opts...)
		rig.serve(key)
		return testing.AllocsPerRun(200, func() { rig.serve(key) })
	}
	off, on := allocs(), allocs(accessLogged)
	if on != off {
		t.Errorf("a replay allocates %.0f times with the access log on, %.0f with it off: the line allocates", on, off)
	}
}
