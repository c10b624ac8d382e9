package tracing

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idempotency-proxy/idempotency-proxy/proxy"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// These benchmarks are proxy's BenchmarkHandlerMiss and BenchmarkHandlerHit
// with tracing on: the real SDK, a batch span processor and an exporter
// that drops the spans, so they measure making spans, not sending them.
//
//	go test -run '^$' -bench 'Handler(Miss|Hit)' -benchmem ./proxy ./tracing

var benchResponse = []byte(`{"id":"ch_3PqL8e2eZvKYlo2C1xkQ9s7b","object":"charge","amount":2000,"currency":"eur","status":"succeeded"}` + "\n")

type fixedUpstream struct{}

func (fixedUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{
		StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(benchResponse))}},
		ContentLength: int64(len(benchResponse)),
		Body:          io.NopCloser(bytes.NewReader(benchResponse)),
		Request:       r,
	}, nil
}

type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

type discardWriter struct {
	header http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.header }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }

type reusableBody struct{ bytes.Reader }

func (*reusableBody) Close() error { return nil }

type benchRig struct {
	h    http.Handler
	w    *discardWriter
	r    *http.Request
	body *reusableBody
	key  []string
}

func newBenchRig(b *testing.B, sampler sdktrace.Sampler) *benchRig {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}), sdktrace.WithSampler(sampler))
	b.Cleanup(func() { tp.Shutdown(context.Background()) })
	tr := New(tp, "bench")
	st := memory.New(memory.Options{})
	b.Cleanup(func() { st.Close() })
	h, err := proxy.New(proxy.Options{
		Upstream:  &url.URL{Scheme: "http", Host: "upstream.invalid"},
		Transport: tr.Transport(fixedUpstream{}),
		Store:     tr.Store(st),
		Observe:   tr.Observe,
	})
	if err != nil {
		b.Fatal(err)
	}
	rig := &benchRig{h: tr.Handler(h), w: &discardWriter{header: http.Header{}}, body: &reusableBody{}, key: []string{""}}
	r, err := http.NewRequest(http.MethodPost, "http://proxy.invalid/v1/charges", nil)
	if err != nil {
		b.Fatal(err)
	}
	r.Header["Content-Type"] = []string{"application/json"}
	r.Header["Authorization"] = []string{"Bearer sk_test_4eC39HqLyjWDarjtT1zdp7dc"}
	r.Header["Idempotency-Key"] = rig.key
	r.Body = rig.body
	rig.r = r
	return rig
}

func (rig *benchRig) serve(key string) int {
	rig.key[0] = key
	rig.body.Reset([]byte(`{"amount":2000,"currency":"eur"}`))
	rig.r.ContentLength = int64(rig.body.Len())
	clear(rig.w.header)
	rig.w.status = 0
	rig.h.ServeHTTP(rig.w, rig.r)
	return rig.w.status
}

var benchSamplers = []struct {
	name    string
	sampler sdktrace.Sampler
}{
	{"sampled", sdktrace.AlwaysSample()},
	{"unsampled", sdktrace.NeverSample()},
}

func BenchmarkTracedHandlerMiss(b *testing.B) {
	for _, s := range benchSamplers {
		b.Run(s.name, func(b *testing.B) {
			rig := newBenchRig(b, s.sampler)
			keys := make([]string, 4096)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if i%len(keys) == 0 {
					b.StopTimer()
					for j := range keys {
						keys[j] = "8e03978e-" + strconv.Itoa(i) + "-" + strconv.Itoa(j)
					}
					b.StartTimer()
				}
				if got := rig.serve(keys[i%len(keys)]); got != http.StatusOK {
					b.Fatalf("status %d, want 200", got)
				}
			}
		})
	}
}

func BenchmarkTracedHandlerHit(b *testing.B) {
	for _, s := range benchSamplers {
		b.Run(s.name, func(b *testing.B) {
			rig := newBenchRig(b, s.sampler)
			const key = "8e03978e-40d5-43e8-bc93-6894a57f9324"
			rig.serve(key)
			b.ReportAllocs()
			for b.Loop() {
				if got := rig.serve(key); got != http.StatusOK {
					b.Fatalf("status %d, want 200", got)
				}
			}
			if rig.w.header.Get("Idempotent-Replayed") != "true" {
				b.Fatal("the benchmark did not measure replays")
			}
		})
	}
}
