package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idempotency-proxy/idempotency-proxy/proxy"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
	clientParent  = "00-" + clientTraceID + "-" + clientSpanID + "-01"
	secretQuery   = "sk_query_secret_value"
	secretAuth    = "Bearer sk_header_secret_value"
)

// traceHeaders records the trace context headers the upstream received.
type traceHeaders struct {
	mu     sync.Mutex
	parent []string
	state  []string
}

func (h *traceHeaders) handler(status int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.parent = append(h.parent, r.Header.Get("Traceparent"))
		h.state = append(h.state, r.Header.Get("Tracestate"))
		h.mu.Unlock()
		w.WriteHeader(status)
		w.Write([]byte(`{"id":"ch_1"}`))
	}
}

func (h *traceHeaders) last() (parent, state string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.parent[len(h.parent)-1], h.state[len(h.state)-1]
}

// One executed request is a server span continuing the client's trace,
// with the store's begin and complete and the upstream call as its
// children; the upstream's parent is the upstream-call span.
func TestExecutedRequestSpansContinueTheClientTrace(t *testing.T) {
	var up traceHeaders
	rg := newRig(t, upstreamURL(t, up.handler(http.StatusCreated)))
	res := rg.do(t, "/v1/charges?token="+secretQuery, "key-1",
		"Traceparent", clientParent, "Tracestate", "vendor=opaque", "Authorization", secretAuth)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("status %d %s, want 201", res.StatusCode, res.body)
	}
	spans := rg.sink.waitFor(t, "server, store and upstream spans", func(s []sdktrace.ReadOnlySpan) bool {
		return len(serverSpans(s)) == 1 && len(s) >= 4
	})
	srv := serverSpans(spans)[0]
	if got := srv.Parent().TraceID().String(); got != clientTraceID {
		t.Errorf("server span trace = %s, want the client's %s", got, clientTraceID)
	}
	if got := srv.Parent().SpanID().String(); got != clientSpanID || !srv.Parent().IsRemote() {
		t.Errorf("server span parent = %s (remote %v), want the client's span %s", got, srv.Parent().IsRemote(), clientSpanID)
	}
	if got, want := srv.Name(), "POST /v1/charges"; got != want {
		t.Errorf("server span name = %q, want %q", got, want)
	}
	for key, want := range map[string]string{
		string(semconv.HTTPRequestMethodKey):      "POST",
		string(semconv.HTTPRouteKey):              "POST /v1/charges",
		string(semconv.HTTPResponseStatusCodeKey): "201",
		string(semconv.URLPathKey):                "/v1/charges",
		string(semconv.ServerAddressKey):          "127.0.0.1",
		string(AttrOutcome):                       "executed",
		string(AttrReplayed):                      "false",
	} {
		if v, ok := attr(srv, attributeKey(key)); !ok || v.Emit() != want {
			t.Errorf("server span %s = %q (set %v), want %q", key, v.Emit(), ok, want)
		}
	}
	hash, _ := attr(srv, AttrKeyHash)
	if len(hash.AsString()) != 32 {
		t.Errorf("server span %s = %q, want the full 32-digit key hash", AttrKeyHash, hash.AsString())
	}

	kids := children(spans, srv)
	for _, name := range []string{SpanStoreBegin, SpanStoreComplete} {
		got := named(kids, name)
		if len(got) != 1 {
			t.Fatalf("%d %s spans under the server span, want 1:%s", len(got), name, describe(spans))
		}
		if v, _ := attr(got[0], AttrKeyHash); v.AsString() != hash.AsString() {
			t.Errorf("%s key hash = %q, want the server span's %q", name, v.AsString(), hash.AsString())
		}
	}
	if v, _ := attr(named(kids, SpanStoreBegin)[0], AttrStoreState); v.AsString() != "acquired" {
		t.Errorf("begin state = %q, want acquired", v.AsString())
	}
	client := named(kids, "POST")
	if len(client) != 1 || client[0].SpanKind() != trace.SpanKindClient {
		t.Fatalf("want one client span POST under the server span:%s", describe(spans))
	}
	if v, _ := attr(client[0], semconv.HTTPResponseStatusCodeKey); v.AsInt64() != http.StatusCreated {
		t.Errorf("upstream span status = %d, want 201", v.AsInt64())
	}

	parent, state := up.last()
	want := "00-" + clientTraceID + "-" + client[0].SpanContext().SpanID().String() + "-01"
	if parent != want {
		t.Errorf("upstream traceparent = %q, want %q (the upstream-call span as parent)", parent, want)
	}
	if state != "vendor=opaque" {
		t.Errorf("upstream tracestate = %q, want the client's vendor=opaque", state)
	}
	for _, sp := range spans {
		for _, kv := range sp.Attributes() {
			if v := kv.Value.Emit(); strings.Contains(v, secretQuery) || strings.Contains(v, "sk_header_secret") {
				t.Errorf("span %s attribute %s = %q leaks a query value or header", sp.Name(), kv.Key, v)
			}
		}
	}
}

// A retry with the same key is a replay: marked on the server span, with
// a begin that found the record and no upstream call.
func TestReplayedRequestIsMarked(t *testing.T) {
	var up traceHeaders
	rg := newRig(t, upstreamURL(t, up.handler(http.StatusCreated)))
	rg.do(t, "/v1/charges", "key-1")
	rg.sink.waitFor(t, "the first request", func(s []sdktrace.ReadOnlySpan) bool { return len(serverSpans(s)) == 1 })
	if res := rg.do(t, "/v1/charges", "key-1"); !res.replayed() {
		t.Fatalf("second request not replayed: %d %s", res.StatusCode, res.body)
	}
	spans := rg.sink.waitFor(t, "the replay", func(s []sdktrace.ReadOnlySpan) bool { return len(serverSpans(s)) == 2 })
	replay := serverSpans(spans)[1]
	if v, _ := attr(replay, AttrReplayed); !v.AsBool() {
		t.Errorf("%s = false on the replay", AttrReplayed)
	}
	if v, _ := attr(replay, AttrOutcome); v.AsString() != "replayed" {
		t.Errorf("%s = %q, want replayed", AttrOutcome, v.AsString())
	}
	kids := children(spans, replay)
	if len(kids) != 1 || kids[0].Name() != SpanStoreBegin {
		t.Fatalf("replay children: want only %s:%s", SpanStoreBegin, describe(kids))
	}
	if v, _ := attr(kids[0], AttrStoreState); v.AsString() != "completed" {
		t.Errorf("begin state = %q, want completed", v.AsString())
	}
}

// Without a valid traceparent the server span starts a trace, and a stray
// tracestate from the client is not sent on with it.
func TestRequestWithoutValidTraceparentStartsATrace(t *testing.T) {
	var up traceHeaders
	rg := newRig(t, upstreamURL(t, up.handler(http.StatusOK)))
	rg.do(t, "/other", "", "Traceparent", "00-not-a-trace-01", "Tracestate", "vendor=stale")
	spans := rg.sink.waitFor(t, "the request", func(s []sdktrace.ReadOnlySpan) bool { return len(serverSpans(s)) == 1 })
	srv := serverSpans(spans)[0]
	if srv.Parent().IsValid() {
		t.Errorf("server span has parent %s, want a root span", srv.Parent().SpanID())
	}
	if _, ok := attr(srv, semconv.HTTPRouteKey); ok {
		t.Errorf("http.route set on a request under the defaults")
	}
	if v, _ := attr(srv, AttrOutcome); v.AsString() != "no_key" {
		t.Errorf("%s = %q, want no_key", AttrOutcome, v.AsString())
	}
	parent, state := up.last()
	if !strings.HasPrefix(parent, "00-"+srv.SpanContext().TraceID().String()+"-") {
		t.Errorf("upstream traceparent = %q, want the server span's trace %s", parent, srv.SpanContext().TraceID())
	}
	if state != "" {
		t.Errorf("upstream tracestate = %q, want none", state)
	}
}

// A 5xx answer fails the server span; a 4xx does not.
func TestServerSpanStatusFollowsTheConventions(t *testing.T) {
	var up traceHeaders
	rg := newRig(t, upstreamURL(t, up.handler(http.StatusInternalServerError)))
	rg.do(t, "/v1/charges", "k")
	rg.do(t, "/v1/charges", strings.Repeat("k", 300))
	spans := rg.sink.waitFor(t, "both requests", func(s []sdktrace.ReadOnlySpan) bool { return len(serverSpans(s)) == 2 })
	for _, sp := range serverSpans(spans) {
		code, _ := attr(sp, semconv.HTTPResponseStatusCodeKey)
		failed := sp.Status().Code.String() == "Error"
		if want := code.AsInt64() >= 500; failed != want {
			t.Errorf("status %d: span failed = %v, want %v", code.AsInt64(), failed, want)
		}
	}
}

// The lease of a traced request names its trace: an operator looking at a
// stuck key finds the trace of the request that holds it.
func TestLeaseNamesTheTraceHoldingTheKey(t *testing.T) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	rg := newRig(t, upstreamURL(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.WriteHeader(http.StatusCreated)
	}))
	done := make(chan *response)
	go func() { done <- rg.do(t, "/v1/charges", "key-1", "Traceparent", clientParent) }()
	<-arrived
	entries, _, err := rg.store.List(context.Background(), store.InFlight, "", 10)
	close(release)
	if res := <-done; res.StatusCode != http.StatusCreated {
		t.Fatalf("status %d %s, want 201", res.StatusCode, res.body)
	}
	if err != nil || len(entries) != 1 {
		t.Fatalf("List = %+v, %v; want the one lease", entries, err)
	}
	if got := entries[0].Lease.TraceID; got != clientTraceID {
		t.Errorf("lease trace id = %q, want the request's %s", got, clientTraceID)
	}
}

// A request answered 202 under Prefer: respond-async says so on its
// server span, which ends while its upstream call runs on.
func TestAcceptedAsyncIsAnEventOnTheServerSpan(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(release) })
	u, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	rg := newRig(t, u, func(o *proxy.Options) {
		o.AsyncSecret = []byte("0123456789abcdef0123456789abcdef")
		o.Routes[0].Policy.Async = proxy.AsyncAllow
	})
	req, err := http.NewRequest("POST", rg.proxy.URL+"/v1/charges", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", "key-1")
	req.Header.Set("Prefer", "respond-async")
	res, err := rg.proxy.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d, want 202", res.StatusCode)
	}
	spans := rg.sink.waitFor(t, "the 202's server span", func(s []sdktrace.ReadOnlySpan) bool { return len(serverSpans(s)) == 1 })
	sp := serverSpans(spans)[0]
	var events []string
	for _, e := range sp.Events() {
		events = append(events, e.Name)
	}
	if !slices.Contains(events, EventAcceptedAsync) {
		t.Errorf("server span events %v, want %s", events, EventAcceptedAsync)
	}
	if v, _ := attr(sp, AttrOutcome); v.AsString() != "accepted_async" {
		t.Errorf("%s = %q, want accepted_async", AttrOutcome, v.AsString())
	}
}
