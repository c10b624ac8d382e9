package tracing

import (
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idempotency-proxy/idempotency-proxy/internal/grpcwire"
	"github.com/idempotency-proxy/idempotency-proxy/proxy"
)

// Handler returns next with a server span around every request. The span
// continues the client's trace context and is in the context next sees, so
// the store and upstream spans are its children. Its attributes follow the
// HTTP semantic conventions without the query string or any header, which
// may carry secrets; Observe adds the route and the idempotency outcome.
func (t *Tracer) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		name, attrs := methodAttrs(r.Method, make([]attribute.KeyValue, 0, 8))
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		attrs = append(attrs, semconv.URLPath(r.URL.Path), semconv.URLScheme(scheme),
			semconv.NetworkProtocolVersion(protocolVersion(r)))
		attrs = hostAttrs(r.Host, attrs)
		if grpcCall(r) {
			// A gRPC call: its method is its path (/package.Service/Method).
			attrs = append(attrs, semconv.RPCSystemNameGRPC, semconv.RPCMethod(strings.TrimPrefix(r.URL.Path, "/")))
		}
		ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))

		sw := &statusWriter{rw: w}
		returned := false
		// Deferred: the reverse proxy aborts a half-written response with
		// panic(http.ErrAbortHandler), and that span must end too.
		defer func() { endServerSpan(span, sw.status, !returned) }()
		next.ServeHTTP(sw, r.WithContext(ctx))
		returned = true
	})
}

// grpcCall reports whether r is a gRPC call: over HTTP/2, Content-Type
// application/grpc.
func grpcCall(r *http.Request) bool {
	ct := r.Header["Content-Type"]
	return r.ProtoMajor == 2 && len(ct) == 1 && grpcwire.IsGRPC(ct[0])
}

// protocolVersion is network.protocol.version: "1.1", "2" or "3".
func protocolVersion(r *http.Request) string {
	switch {
	case r.ProtoMajor == 1 && r.ProtoMinor == 1:
		return "1.1"
	case r.ProtoMajor >= 2:
		return strconv.Itoa(r.ProtoMajor)
	}
	return strconv.Itoa(r.ProtoMajor) + "." + strconv.Itoa(r.ProtoMinor)
}

func endServerSpan(span trace.Span, status int, aborted bool) {
	if status > 0 {
		span.SetAttributes(semconv.HTTPResponseStatusCode(status))
	}
	switch {
	case aborted:
		span.SetAttributes(semconv.ErrorTypeKey.String("response_aborted"))
		span.SetStatus(codes.Error, "response aborted")
	case status >= 500:
		// Only 5xx mark a server span failed: a 4xx is the client's error.
		span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(status)))
		span.SetStatus(codes.Error, "")
	}
	span.End()
}

// Observe annotates the request's server span with what the proxy did. It
// is the proxy's Options.Observe.
func (t *Tracer) Observe(r *http.Request, o proxy.Observation) {
	span := trace.SpanFromContext(r.Context())
	if !span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, AttrOutcome.String(string(o.Outcome)), AttrReplayed.Bool(o.Outcome == proxy.OutcomeReplayed))
	if o.KeyHash != "" {
		attrs = append(attrs, AttrKeyHash.String(o.KeyHash))
	}
	if o.Route != "" {
		attrs = append(attrs, semconv.HTTPRoute(o.Route))
		name := "HTTP"
		if knownMethods[r.Method] {
			name = r.Method
		}
		span.SetName(name + " " + routeTarget(o.Route))
	}
	span.SetAttributes(attrs...)
	if o.Outcome == proxy.OutcomeAcceptedAsync {
		// The span ends with the 202; the call it started goes on.
		span.AddEvent(EventAcceptedAsync)
	}
}

// routeTarget is a route's pattern without its method, for the span name
// "{method} {target}" of the HTTP conventions: "POST /v1/charges" gives
// "/v1/charges".
func routeTarget(pattern string) string {
	if i := strings.IndexAny(pattern, " \t"); i >= 0 {
		return strings.TrimLeft(pattern[i:], " \t")
	}
	return pattern
}

// statusWriter notes the status a response was sent with. Flushing and
// hijacking (protocol upgrades) reach the writer it wraps: the reverse
// proxy streams through http.ResponseController, which uses FlushError and
// Unwrap.
type statusWriter struct {
	rw     http.ResponseWriter
	status int
}

var _ http.ResponseWriter = (*statusWriter)(nil)

func (w *statusWriter) Header() http.Header { return w.rw.Header() }

func (w *statusWriter) WriteHeader(code int) {
	// Informational responses precede the final one (101 is final).
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.rw.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.rw.Write(p)
}

func (w *statusWriter) FlushError() error { return http.NewResponseController(w.rw).Flush() }

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.rw }
