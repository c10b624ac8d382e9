package e2e

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const (
	clientTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID      = "00f067aa0ba902b7"
	clientTraceparent = "00-" + clientTraceID + "-" + clientSpanID + "-01"
)

// tracingConfig enables tracing and names one route, so spans carry
// http.route.
const tracingConfig = "tracing:\n  enabled: true\nroutes:\n  - match: \"POST /v1/charges\"\n"

// collectorEnv points the exporter at c. The batch processor's schedule is
// a minute, so only the flush at exit can deliver the spans within a test.
func collectorEnv(c *otlpCollector) []string {
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + c.URL(), "OTEL_BSP_SCHEDULE_DELAY=60000"}
}

func childrenOf(spans []collectedSpan, parent collectedSpan) map[string][]collectedSpan {
	out := map[string][]collectedSpan{}
	for _, s := range spans {
		if s.ParentID() == parent.ID() && s.TraceID() == parent.TraceID() {
			out[s.GetName()] = append(out[s.GetName()], s)
		}
	}
	return out
}

// With tracing enabled by config and the endpoint by
// OTEL_EXPORTER_OTLP_ENDPOINT, the built binary exports, at the latest when
// it exits: a server span continuing the client's traceparent, with the
// store operations and the upstream call as children, and the upstream
// receives the upstream-call span as its parent.
func TestTracesReachTheCollectorWithTheirParents(t *testing.T) {
	col := startCollector(t)
	up := startHeaderUpstream(t)
	p := startTracedProxy(t, up.URL(), tracingConfig, collectorEnv(col)...)
	c := newClient(t, 10*time.Second)

	first := mustSend(t, c, p.URL(), request{Path: "/v1/charges?card=4242secret", Key: "order-1",
		Header: map[string]string{"Traceparent": clientTraceparent, "Tracestate": "vendor=opaque", "Authorization": "Bearer topsecret"}})
	if first.Status != http.StatusCreated {
		t.Fatalf("first request: %s %s", first, first.Body)
	}
	if again := mustSend(t, c, p.URL(), request{Path: "/v1/charges?card=4242secret", Key: "order-1",
		Header: map[string]string{"Authorization": "Bearer topsecret"}}); !again.Replayed() {
		t.Fatalf("retry: %s, want a replay", again)
	}
	p.Stop(t)

	spans, _ := col.Spans()
	var server []collectedSpan
	for _, s := range spans {
		if s.GetKind().String() == "SPAN_KIND_SERVER" {
			server = append(server, s)
		}
	}
	if len(server) != 2 {
		t.Fatalf("%d server spans exported, want 2: %v", len(server), spans)
	}
	srv, replay := server[0], server[1]
	if srv.Attr("idempotency.replayed") == "true" {
		srv, replay = replay, srv
	}
	if srv.TraceID() != clientTraceID || srv.ParentID() != clientSpanID {
		t.Errorf("server span in trace %s with parent %s, want the client's %s and %s", srv.TraceID(), srv.ParentID(), clientTraceID, clientSpanID)
	}
	if got := srv.Resource["service.name"]; got != "idempotency-proxy" {
		t.Errorf("service.name = %q, want idempotency-proxy", got)
	}
	for key, want := range map[string]string{
		"http.request.method":       "POST",
		"http.route":                "POST /v1/charges",
		"http.response.status_code": "201",
		"url.path":                  "/v1/charges",
		"server.address":            "127.0.0.1",
		"idempotency.outcome":       "executed",
		"idempotency.replayed":      "false",
	} {
		if got := srv.Attr(key); got != want {
			t.Errorf("server span %s = %q, want %q", key, got, want)
		}
	}
	keyHash := srv.Attr("idempotency.key_hash")
	if len(keyHash) != 32 {
		t.Errorf("idempotency.key_hash = %q, want the full 32-digit hash", keyHash)
	}
	if replay.Attr("idempotency.replayed") != "true" || replay.Attr("idempotency.outcome") != "replayed" || replay.Attr("idempotency.key_hash") != keyHash {
		t.Errorf("replay span: replayed=%q outcome=%q key_hash=%q, want true, replayed, %q",
			replay.Attr("idempotency.replayed"), replay.Attr("idempotency.outcome"), replay.Attr("idempotency.key_hash"), keyHash)
	}

	kids := childrenOf(spans, srv)
	for _, name := range []string{"idempotency.store.begin", "idempotency.store.complete", "POST"} {
		if len(kids[name]) != 1 {
			t.Fatalf("%d %q spans under the server span, want 1: %v", len(kids[name]), name, spans)
		}
	}
	call := kids["POST"][0]
	if call.GetKind().String() != "SPAN_KIND_CLIENT" || call.Attr("http.response.status_code") != "201" {
		t.Errorf("upstream span: kind %s status %q, want a client span with 201", call.GetKind(), call.Attr("http.response.status_code"))
	}
	got := up.Received("order-1")
	if len(got) != 1 {
		t.Fatalf("upstream received %d requests for order-1, want 1", len(got))
	}
	if want := "00-" + clientTraceID + "-" + call.ID() + "-01"; got[0].Get("Traceparent") != want {
		t.Errorf("upstream traceparent = %q, want %q (the upstream-call span as parent)", got[0].Get("Traceparent"), want)
	}
	if got[0].Get("Tracestate") != "vendor=opaque" {
		t.Errorf("upstream tracestate = %q, want vendor=opaque", got[0].Get("Tracestate"))
	}
	for _, s := range spans {
		for _, kv := range s.GetAttributes() {
			if v := anyValue(kv.GetValue()); strings.Contains(v, "secret") {
				t.Errorf("span %s: %s = %q carries a query value or header", s.GetName(), kv.GetKey(), v)
			}
		}
	}
}

// Disabled (the default), the upstream receives the client's trace context
// unchanged, and nothing is exported even with an endpoint set.
func TestTracingDisabledChangesNoHeader(t *testing.T) {
	col := startCollector(t)
	up := startHeaderUpstream(t)
	p := startTracedProxy(t, up.URL(), "", collectorEnv(col)...)
	c := newClient(t, 10*time.Second)
	r := mustSend(t, c, p.URL(), request{Path: "/v1/charges", Key: "order-1",
		Header: map[string]string{"Traceparent": clientTraceparent, "Tracestate": "vendor=opaque"}})
	if r.Status != http.StatusCreated {
		t.Fatalf("request: %s", r)
	}
	p.Stop(t)
	got := up.Received("order-1")
	if len(got) != 1 || got[0].Get("Traceparent") != clientTraceparent || got[0].Get("Tracestate") != "vendor=opaque" {
		t.Fatalf("upstream trace context = %v, want the client's traceparent and tracestate unchanged", got)
	}
	if spans, exports := col.Spans(); exports != 0 {
		t.Fatalf("%d exports (%d spans) with tracing disabled, want none", exports, len(spans))
	}
}

// With tracing on, the proxy still knows a request reached the upstream
// (the httptrace hook in the upstream request's context survives the
// traced transport): an upstream that hangs up after reading the request
// may have acted on it, so under on_upstream_error keep the 502 is
// recorded and the retry replays it without a second execution.
func TestTracedProxyKnowsTheRequestWasSent(t *testing.T) {
	col := startCollector(t)
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		calls.Add(1)
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(up.Close)
	p := startTracedProxy(t, up.URL, tracingConfig+"defaults:\n  on_upstream_error: keep\n", collectorEnv(col)...)
	c := newClient(t, 10*time.Second)
	first := mustSend(t, c, p.URL(), request{Path: "/v1/charges", Key: "k", Body: "{}"})
	if first.Status != http.StatusBadGateway || first.Problem() != "upstream-failed" {
		t.Fatalf("first: %s, want 502 upstream-failed", first)
	}
	retry := mustSend(t, c, p.URL(), request{Path: "/v1/charges", Key: "k", Body: "{}"})
	if retry.Status != http.StatusBadGateway || !retry.Replayed() || calls.Load() != 1 {
		t.Fatalf("retry: %s after %d executions, want the recorded 502 and one execution", retry, calls.Load())
	}
	p.Stop(t)
	spans, _ := col.Spans()
	var outcomes []string
	for _, s := range spans {
		if s.GetKind().String() == "SPAN_KIND_SERVER" {
			outcomes = append(outcomes, s.Attr("idempotency.outcome"))
		}
	}
	if strings.Join(outcomes, ",") != "upstream_error,replayed" {
		t.Errorf("server span outcomes = %v, want upstream_error then replayed", outcomes)
	}
}
