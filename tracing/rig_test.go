package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/idempotency-proxy/idempotency-proxy/proxy"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// spanSink is a span processor that keeps every ended span and wakes
// whoever waits for one.
type spanSink struct {
	mu      sync.Mutex
	spans   []sdktrace.ReadOnlySpan
	changed chan struct{}
}

func newSpanSink() *spanSink { return &spanSink{changed: make(chan struct{})} }

func (s *spanSink) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (s *spanSink) Shutdown(context.Context) error                  { return nil }
func (s *spanSink) ForceFlush(context.Context) error                { return nil }

func (s *spanSink) OnEnd(sp sdktrace.ReadOnlySpan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spans = append(s.spans, sp)
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitFor returns the ended spans once ok accepts them, failing the test
// after a generous deadline.
func (s *spanSink) waitFor(t *testing.T, what string, ok func([]sdktrace.ReadOnlySpan) bool) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		s.mu.Lock()
		spans, changed := append([]sdktrace.ReadOnlySpan(nil), s.spans...), s.changed
		s.mu.Unlock()
		if ok(spans) {
			return spans
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("timed out waiting for %s; spans: %s", what, describe(spans))
		}
	}
}

// serverSpans returns the ended server spans.
func serverSpans(spans []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, sp := range spans {
		if sp.SpanKind() == trace.SpanKindServer {
			out = append(out, sp)
		}
	}
	return out
}

// children returns the spans whose parent is parent.
func children(spans []sdktrace.ReadOnlySpan, parent sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, sp := range spans {
		if sp.Parent().SpanID() == parent.SpanContext().SpanID() && sp.Parent().TraceID() == parent.SpanContext().TraceID() {
			out = append(out, sp)
		}
	}
	return out
}

func named(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, sp := range spans {
		if sp.Name() == name {
			out = append(out, sp)
		}
	}
	return out
}

func attr(sp sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range sp.Attributes() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func describe(spans []sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	for _, sp := range spans {
		b.WriteString("\n  " + sp.Name() + " " + sp.SpanKind().String() + " " + sp.SpanContext().SpanID().String() + " parent " + sp.Parent().SpanID().String())
		for _, kv := range sp.Attributes() {
			b.WriteString(" " + string(kv.Key) + "=" + kv.Value.Emit())
		}
	}
	return b.String()
}

// rig is a traced proxy handler on a real listener, in front of upstream.
type rig struct {
	sink  *spanSink
	proxy *httptest.Server
	store *memory.Store // under the traced store
}

type rigOption func(*proxy.Options)

// newRig serves a traced handler — store, transport, observer and server
// span wrapped as the wiring does — in front of up, with routes as in a
// config file.
func newRig(t *testing.T, up *url.URL, opts ...rigOption) *rig {
	t.Helper()
	sink := newSpanSink()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sink))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	tr := New(tp, "test")

	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	o := proxy.Options{
		Upstream:  up,
		Store:     tr.Store(st),
		Transport: tr.Transport(proxy.NewTransport()),
		Observe:   tr.Observe,
		Default:   proxy.DefaultPolicy(),
		Routes: []proxy.Route{
			{Pattern: "POST /v1/charges", Policy: proxy.DefaultPolicy()},
		},
	}
	for _, f := range opts {
		f(&o)
	}
	h, err := proxy.New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(tr.Handler(h))
	t.Cleanup(srv.Close)
	return &rig{sink: sink, proxy: srv, store: st}
}

func keepOnUpstreamError(o *proxy.Options) {
	o.Default.OnUpstreamError = proxy.UpstreamErrorKeep
	for i := range o.Routes {
		o.Routes[i].Policy.OnUpstreamError = proxy.UpstreamErrorKeep
	}
}

// response is a finished response with its body read.
type response struct {
	*http.Response
	body string
}

func (r *response) replayed() bool { return r.Header.Get("Idempotent-Replayed") == "true" }

// do sends a POST with key (none when "") and header pairs.
func (r *rig) do(t *testing.T, path, key string, header ...string) *response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, r.proxy.URL+path, strings.NewReader(`{"amount":100}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := r.proxy.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return &response{Response: res, body: string(body)}
}

// upstreamURL serves h on a loopback listener for the test.
func upstreamURL(t *testing.T, h http.HandlerFunc) *url.URL {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func attributeKey(s string) attribute.Key { return attribute.Key(s) }
