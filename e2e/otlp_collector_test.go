package e2e

import (
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
)

// collectedSpan is one span an OTLP export delivered, with its resource.
type collectedSpan struct {
	*tracepb.Span
	Resource map[string]string
}

func (s collectedSpan) ID() string       { return hex.EncodeToString(s.GetSpanId()) }
func (s collectedSpan) TraceID() string  { return hex.EncodeToString(s.GetTraceId()) }
func (s collectedSpan) ParentID() string { return hex.EncodeToString(s.GetParentSpanId()) }

// Attr returns the attribute's value as text ("" when absent).
func (s collectedSpan) Attr(key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return anyValue(kv.GetValue())
		}
	}
	return ""
}

func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	}
	return v.String()
}

// otlpCollector is an in-process OTLP/HTTP trace receiver: it decodes each
// ExportTraceServiceRequest (protobuf) and keeps its spans.
type otlpCollector struct {
	srv *httptest.Server

	mu      sync.Mutex
	exports int
	spans   []collectedSpan
	// exported is closed and replaced after each export, so a test can wait
	// for the next one instead of polling.
	exported chan struct{}
}

func startCollector(t *testing.T) *otlpCollector {
	t.Helper()
	c := &otlpCollector{exported: make(chan struct{})}
	c.srv = httptest.NewServer(http.HandlerFunc(c.export))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *otlpCollector) URL() string { return c.srv.URL }

func (c *otlpCollector) export(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	req := &coltracepb.ExportTraceServiceRequest{}
	if r.URL.Path != "/v1/traces" || err != nil || proto.Unmarshal(body, req) != nil {
		http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.exports++
	for _, rs := range req.GetResourceSpans() {
		res := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			res[kv.GetKey()] = anyValue(kv.GetValue())
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				c.spans = append(c.spans, collectedSpan{Span: sp, Resource: res})
			}
		}
	}
	close(c.exported)
	c.exported = make(chan struct{})
	c.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// Spans returns what was exported so far, and how many exports carried it.
func (c *otlpCollector) Spans() ([]collectedSpan, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]collectedSpan(nil), c.spans...), c.exports
}

// WaitFor waits until some exported span satisfies match, or the timeout
// passes, and returns that span.
func (c *otlpCollector) WaitFor(timeout time.Duration, match func(collectedSpan) bool) (collectedSpan, bool) {
	deadline := time.After(timeout)
	for {
		c.mu.Lock()
		next := c.exported
		for _, s := range c.spans {
			if match(s) {
				c.mu.Unlock()
				return s, true
			}
		}
		c.mu.Unlock()
		select {
		case <-next:
		case <-deadline:
			return collectedSpan{}, false
		}
	}
}

// tracedProxy is an idempotency-proxy process on the memory store, started
// with its own environment (the OTEL_* variables of a test).
type tracedProxy struct {
	proc   *testbin.Process
	listen string
	admin  string // host:port of the admin listener
}

// startTracedProxy runs the binary with config lines after the listeners,
// with env added to its environment (the OTEL_* variables of a test; they
// override any the test process inherited). It returns once /readyz is 200.
func startTracedProxy(t *testing.T, upstream, config string, env ...string) *tracedProxy {
	t.Helper()
	p := &tracedProxy{listen: freeAddr(t), admin: freeAddr(t)}
	admin := p.admin
	file := filepath.Join(t.TempDir(), "proxy.yaml")
	yaml := fmt.Sprintf("listen: %q\nadmin_listen: %q\nupstream:\n  url: %q\nstore:\n  kind: memory\n%s",
		p.listen, admin, upstream, config)
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	p.proc = testbin.Start(t, testbin.Command{Path: proxyBin, Args: []string{"--config", file}, Env: env})
	waitStatus(t, "http://"+admin+"/readyz", http.StatusOK, readyTimeout)
	return p
}

func (p *tracedProxy) URL() string { return "http://" + p.listen }

// Stop sends SIGTERM and waits for the process to exit: it drains, then
// exports the spans still queued.
func (p *tracedProxy) Stop(t *testing.T) {
	t.Helper()
	if err := p.proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, ok := p.proc.Wait(30 * time.Second)
	if !ok {
		t.Fatalf("proxy did not exit after SIGTERM")
	}
	if code != 0 {
		t.Fatalf("proxy exited with %d", code)
	}
}

// headerUpstream answers 201 and records the trace context headers of each
// request, by idempotency key.
type headerUpstream struct {
	srv *httptest.Server

	mu       sync.Mutex
	received map[string][]http.Header
}

func startHeaderUpstream(t *testing.T) *headerUpstream {
	t.Helper()
	u := &headerUpstream{received: map[string][]http.Header{}}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		u.mu.Lock()
		key := r.Header.Get("Idempotency-Key")
		u.received[key] = append(u.received[key], r.Header.Clone())
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":"ch_1"}`))
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *headerUpstream) URL() string { return u.srv.URL }

// Received returns the headers of the requests with key.
func (u *headerUpstream) Received(key string) []http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.received[key]
}
