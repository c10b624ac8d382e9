package proxy

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// These benchmarks measure the handler alone: the upstream is an in-process
// RoundTripper and the ResponseWriter a reusable stub, so no socket is
// involved. bench/loadbench measures the whole process over loopback.
//
//	go test -run '^$' -bench . -benchmem ./proxy

// benchResponseBody is a typical small JSON API answer, about 200 bytes.
var benchResponseBody = []byte(`{"id":"ch_3PqL8e2eZvKYlo2C1xkQ9s7b","object":"charge","amount":2000,` +
	`"currency":"eur","status":"succeeded","captured":true,"description":"load benchmark charge",` +
	`"created":1718000000,"livemode":false}` + "\n")

var benchRequestBody = []byte(`{"amount":2000,"currency":"eur","customer":"cus_9s6XKzkNRiz8i3","description":"load benchmark"}`)

// fixedUpstream answers every request with benchResponseBody, like a
// transport would after reading the request body.
type fixedUpstream struct{ contentLength string }

func (u fixedUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{
		Status:        "200 OK",
		StatusCode:    http.StatusOK,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"application/json"}, "Content-Length": {u.contentLength}},
		ContentLength: int64(len(benchResponseBody)),
		Body:          io.NopCloser(bytes.NewReader(benchResponseBody)),
		Request:       r,
	}, nil
}

// discardWriter is a ResponseWriter that keeps nothing but its header map,
// cleared between requests so it costs no allocation once warm.
type discardWriter struct {
	header http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.header }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }

// EnableFullDuplex lets a pass-through request enable full duplex, as
// net/http's own writer does.
func (*discardWriter) EnableFullDuplex() error { return nil }

func (w *discardWriter) reset() {
	clear(w.header)
	w.status = 0
}

// reusableBody is a request body that can be rewound for the next request.
type reusableBody struct{ bytes.Reader }

func (*reusableBody) Close() error { return nil }

// benchRig is one handler on the memory store and one request it serves
// again and again, with a new key (miss) or the same one (hit).
type benchRig struct {
	h    *Handler
	w    *discardWriter
	r    *http.Request
	body *reusableBody
	key  []string
}

func newBenchRig(tb testing.TB, opts ...envOption) *benchRig {
	tb.Helper()
	st := memory.New(memory.Options{})
	tb.Cleanup(func() { st.Close() })
	o := Options{
		Upstream:  &url.URL{Scheme: "http", Host: "upstream.invalid"},
		Transport: fixedUpstream{contentLength: strconv.Itoa(len(benchResponseBody))},
		Store:     st,
	}
	for _, f := range opts {
		f(&o)
	}
	h, err := New(o)
	if err != nil {
		tb.Fatal(err)
	}
	rig := &benchRig{h: h, w: &discardWriter{header: http.Header{}}, body: &reusableBody{}, key: []string{""}}
	r, err := http.NewRequest(http.MethodPost, "http://proxy.invalid/v1/charges", nil)
	if err != nil {
		tb.Fatal(err)
	}
	r.Header["Content-Type"] = []string{"application/json"}
	r.Header["Authorization"] = []string{"Bearer sk_test_4eC39HqLyjWDarjtT1zdp7dc"}
	r.Header["Idempotency-Key"] = rig.key
	r.Body = rig.body
	r.RemoteAddr = "127.0.0.1:50000"
	rig.r = r
	return rig
}

// serve sends the request once with key and returns the status. The handler
// never keeps the request after ServeHTTP returns: it forwards a copy. It
// may replace its body with what it read of it (methodparam.go), so the
// body is given again each time, as a server gives each request its own.
func (rig *benchRig) serve(key string) int {
	rig.key[0] = key
	rig.body.Reset(benchRequestBody)
	rig.r.Body, rig.r.ContentLength = rig.body, int64(len(benchRequestBody))
	rig.w.reset()
	rig.h.ServeHTTP(rig.w, rig.r)
	return rig.w.status
}

// missKeys returns n distinct keys; making them is left out of the
// measurements.
func missKeys(batch, n int) []string {
	keys := make([]string, n)
	prefix := "8e03978e-40d5-43e8-" + strconv.Itoa(batch) + "-"
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
	}
	return keys
}

// loopMisses serves a new key on every iteration. Keys come in batches made
// with the timer stopped, so the benchmark neither measures their
// allocation nor holds b.N of them at once.
func loopMisses(b *testing.B, serve func(key string) int) {
	const batch = 4096
	var keys []string
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%batch == 0 {
			b.StopTimer()
			keys = missKeys(i/batch, batch)
			b.StartTimer()
		}
		if got := serve(keys[i%batch]); got != http.StatusOK {
			b.Fatalf("status %d, want 200", got)
		}
	}
}

func BenchmarkHandlerMiss(b *testing.B) {
	rig := newBenchRig(b)
	loopMisses(b, rig.serve)
}

// accessLogged turns the access log on, written as JSON to nowhere: the
// cost of building and encoding the line, not of the disk (the binary
// buffers it, internal/logbuf).
func accessLogged(o *Options) {
	o.AccessLog = true
	o.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
	o.AccessLogOutput = io.Discard
}

func BenchmarkHandlerMissAccessLog(b *testing.B) {
	rig := newBenchRig(b, accessLogged)
	loopMisses(b, rig.serve)
}

func BenchmarkHandlerHitAccessLog(b *testing.B) { benchmarkHit(b, accessLogged) }

func BenchmarkHandlerHit(b *testing.B) { benchmarkHit(b) }

// BenchmarkHandlerNoKey forwards a request without a key: what a miss
// costs above it is the handler's share of the idempotency tax.
func BenchmarkHandlerNoKey(b *testing.B) {
	rig := newBenchRig(b)
	delete(rig.r.Header, "Idempotency-Key")
	b.ReportAllocs()
	for b.Loop() {
		if got := rig.serve(""); got != http.StatusOK {
			b.Fatalf("status %d, want 200", got)
		}
	}
}

func benchmarkHit(b *testing.B, opts ...envOption) { loopHits(b, newBenchRig(b, opts...)) }

// loopHits replays one key through rig, after a first request records it.
func loopHits(b *testing.B, rig *benchRig) {
	const key = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	if got := rig.serve(key); got != http.StatusOK {
		b.Fatalf("first request: status %d, want 200", got)
	}
	b.ReportAllocs()
	for b.Loop() {
		if got := rig.serve(key); got != http.StatusOK {
			b.Fatalf("status %d, want 200", got)
		}
	}
	if got := rig.w.header.Get("Idempotent-Replayed"); got != "true" {
		b.Fatalf("Idempotent-Replayed = %q, want true: the benchmark did not measure replays", got)
	}
}

func BenchmarkFingerprint(b *testing.B) {
	r, err := http.NewRequest(http.MethodPost, "http://proxy.invalid/v1/charges?expand=customer", nil)
	if err != nil {
		b.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/json")
	headers := DefaultPolicy().FingerprintHeaders
	b.ReportAllocs()
	b.SetBytes(int64(len(benchRequestBody)))
	for b.Loop() {
		fingerprint(r, readAsSent(r), "proxy.invalid", benchRequestBody, headers)
	}
}

func BenchmarkParseKey(b *testing.B) {
	for _, tc := range []struct{ name, value string }{
		{"raw", "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{"sf-string", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h := http.Header{"Idempotency-Key": {tc.value}}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := parseKey(h, "Idempotency-Key"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Allocations per request are the same on every machine, so they are
// checked here, unlike CPU times. The bounds are docs/performance.md's targets.
func TestHandlerAllocations(t *testing.T) {
	checkAllocations(t, keyedAllocations())
}

// allocRuns is how many requests an allocation count is the mean of.
const allocRuns = 200

// allocation is a kind of request and the most allocations it may cost.
type allocation struct {
	name string
	max  float64
	// setup returns the function measured; it runs allocRuns+1 times.
	setup func(*benchRig) func() int
}

// keyedAllocations are a keyed request's miss and replay.
func keyedAllocations() []allocation {
	return []allocation{
		{"miss", 45, func(rig *benchRig) func() int {
			keys, i := missKeys(0, allocRuns+1), 0
			return func() int { i++; return rig.serve(keys[i-1]) }
		}},
		{"hit", 6, func(rig *benchRig) func() int {
			const key = "8e03978e-40d5-43e8-bc93-6894a57f9324"
			rig.serve(key)
			return func() int { return rig.serve(key) }
		}},
	}
}

// checkAllocations measures each of tests on a bench rig of its own,
// given opts, and fails those that allocate more than their max.
func checkAllocations(t *testing.T, tests []allocation, opts ...envOption) {
	t.Helper()
	if raceEnabled() {
		t.Skip("the race detector drops sync.Pool items and adds allocations")
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rig := newBenchRig(t, opts...)
			serve := tc.setup(rig)
			var status int
			got := testing.AllocsPerRun(allocRuns, func() { status = serve() })
			if status != http.StatusOK {
				t.Fatalf("status %d, want 200", status)
			}
			t.Logf("%s: %.0f allocations per request", tc.name, got)
			if got > tc.max {
				t.Errorf("%s: %.0f allocations per request, want at most %.0f", tc.name, got, tc.max)
			}
		})
	}
}

// raceEnabled reports whether the test binary was built with -race, from
// the build settings the go command records in every binary.
func raceEnabled() bool {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range info.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// methodRoutes gives the handler a table whose patterns name methods, as
// the README's do: a POST may then be read as another method (its
// override headers, a _method parameter), and requests without either
// must cost no more for it.
func methodRoutes(o *Options) {
	p := DefaultPolicy()
	o.Routes = []Route{
		{Pattern: "POST /v1/charges", Policy: p},
		{Pattern: "DELETE /v1/accounts/{id}", Policy: p},
	}
}

// TestHandlerAllocationsOnMethodRoutes pins the allocations of a JSON
// request on a route table whose patterns name methods, where its body is
// read for a "_method" member before it is routed (methodparam.go): a
// keyed request reads it once, as on the defaults, so a miss and a replay
// cost nothing more; a request passed through without a key gets the body
// read (its buffer), a reader of its own and the in-memory forwarding that
// sends headers and body in one write — three allocations more than the
// stream it was.
func TestHandlerAllocationsOnMethodRoutes(t *testing.T) {
	checkAllocations(t, append(keyedAllocations(), allocation{"no key", 30, func(rig *benchRig) func() int {
		delete(rig.r.Header, "Idempotency-Key")
		return func() int { return rig.serve("") }
	}}), methodRoutes)
}
