// Package tracing instruments the proxy with OpenTelemetry: a server span
// per request, a child span for each store operation and for the upstream
// call. The client's W3C trace context (traceparent, tracestate) is
// continued, and the upstream receives the upstream-call span as its
// parent. Provider exports the spans over OTLP, configured by the standard
// OTEL_* variables; see docs/tracing.md.
//
// Nothing here runs unless tracing is enabled: the wiring wraps the
// handler, its store and its transport only then.
package tracing

import (
	"net"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of every span made here.
const ScopeName = "github.com/idempotency-proxy/idempotency-proxy/tracing"

// EventAcceptedAsync marks the server span of a request answered 202
// under Prefer: respond-async: its upstream call runs on, detached.
const EventAcceptedAsync = "idempotency.accepted_async"

// Attributes of the proxy's own, beside the HTTP semantic conventions.
const (
	// AttrOutcome is the request's outcome, as in the metrics' outcome label.
	AttrOutcome = attribute.Key("idempotency.outcome")
	// AttrKeyHash is the full hash of the scoped idempotency key, the name
	// the store knows the key by; logs show its first 12 characters.
	AttrKeyHash = attribute.Key("idempotency.key_hash")
	// AttrReplayed is true when the response was a recorded one.
	AttrReplayed = attribute.Key("idempotency.replayed")
	// AttrStoreState is what a store begin found: acquired, in_flight or
	// completed.
	AttrStoreState = attribute.Key("idempotency.store.state")
)

// Tracer makes the proxy's spans with one TracerProvider.
type Tracer struct {
	tracer trace.Tracer
	// Only W3C trace context: baggage is the client's business with the
	// upstream and passes through as any header.
	prop propagation.TraceContext
}

// New returns a Tracer making spans with tp; version is the
// instrumentation scope's version.
func New(tp trace.TracerProvider, version string) *Tracer {
	return &Tracer{tracer: tp.Tracer(ScopeName, trace.WithInstrumentationVersion(version))}
}

// knownMethods are the methods the HTTP conventions name; any other is
// reported as _OTHER, so a client cannot mint attribute values.
var knownMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true,
	http.MethodPut: true, http.MethodPatch: true, http.MethodDelete: true,
	http.MethodConnect: true, http.MethodOptions: true, http.MethodTrace: true,
}

// methodAttrs appends the http.request.method attributes of method to
// attrs and returns the span name it gives.
func methodAttrs(method string, attrs []attribute.KeyValue) (string, []attribute.KeyValue) {
	if knownMethods[method] {
		return method, append(attrs, semconv.HTTPRequestMethodKey.String(method))
	}
	return "HTTP", append(attrs, semconv.HTTPRequestMethodKey.String("_OTHER"), semconv.HTTPRequestMethodOriginal(method))
}

// hostAttrs returns server.address and server.port of a host[:port].
func hostAttrs(hostport string, attrs []attribute.KeyValue) []attribute.KeyValue {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, ""
	}
	if host != "" {
		attrs = append(attrs, semconv.ServerAddress(host))
	}
	if p, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, semconv.ServerPort(p))
	}
	return attrs
}
