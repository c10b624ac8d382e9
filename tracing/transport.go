package tracing

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idempotency-proxy/idempotency-proxy/proxy"
)

// Transport returns next with a client span around every upstream call,
// a child of the span in the request's context. The upstream receives that
// span's context in traceparent (and tracestate), replacing the client's.
// The span ends when the response body is read to its end or closed.
func (t *Tracer) Transport(next http.RoundTripper) http.RoundTripper {
	return &transport{tracer: t.tracer, next: next}
}

type transport struct {
	tracer trace.Tracer
	prop   propagation.TraceContext
	next   http.RoundTripper
}

func (tr *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	name, attrs := methodAttrs(r.Method, make([]attribute.KeyValue, 0, 6))
	full := redactedURL(r.URL)
	if target, ok := proxy.LookupTarget(r.Context()); ok {
		// A lookup's filled target may hold the key, a header's value or
		// the body's: named by its template instead, without its query.
		path, _, _ := strings.Cut(target, "?")
		full = r.URL.Scheme + "://" + r.URL.Host + path
	}
	attrs = append(attrs, semconv.URLFull(full))
	attrs = hostAttrs(r.URL.Host, attrs)
	ctx, span := tr.tracer.Start(r.Context(), name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))

	// A RoundTripper must not modify its request, so the headers go on a
	// clone. The clone's context derives from r's and keeps its values,
	// among them the httptrace.ClientTrace by which the proxy learns
	// whether the request reached the upstream (never sent or maybe sent).
	out := r.Clone(ctx)
	// A client's tracestate belongs to its traceparent: it is sent again
	// only as part of the continued trace (when the client's traceparent
	// was valid, the span context carries it).
	delete(out.Header, "Tracestate")
	tr.prop.Inject(ctx, propagation.HeaderCarrier(out.Header))

	resp, err := tr.next.RoundTrip(out)
	if err != nil {
		span.SetAttributes(semconv.ErrorTypeKey.String(errorType(r.Context(), err)))
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.End()
		return resp, err
	}
	span.SetAttributes(semconv.HTTPResponseStatusCode(resp.StatusCode))
	if resp.StatusCode >= 400 {
		span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(resp.StatusCode)))
		span.SetStatus(codes.Error, "")
	}
	switch body := resp.Body.(type) {
	case nil:
		span.End()
	case io.ReadWriteCloser:
		// A 101's body is the upgraded connection, and the reverse proxy
		// needs it to stay an io.ReadWriteCloser: the call ends here.
		span.End()
	default:
		resp.Body = &spanBody{ReadCloser: body, span: span}
	}
	return resp, nil
}

// redactedURL is u without user info, query or fragment: query values and
// credentials may be secrets.
func redactedURL(u *url.URL) string {
	v := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	return v.String()
}

// errorType is a low-cardinality error.type for an upstream call that
// failed with err, on ctx. A call the proxy cut at its deadline has a
// timeout as its context's cause (execution.Cut), which the HTTP/1
// transport returns and the HTTP/2 one reports as context.Canceled.
func errorType(ctx context.Context, err error) string {
	if isTimeout(err) || errors.Is(err, context.Canceled) && isTimeout(context.Cause(ctx)) {
		return "timeout"
	}
	return "_OTHER"
}

func isTimeout(err error) bool {
	t, ok := err.(interface{ Timeout() bool })
	return ok && t.Timeout()
}

// spanBody ends the upstream span when its body is done: read to the end,
// failed, or closed.
type spanBody struct {
	io.ReadCloser
	span trace.Span
}

func (b *spanBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.span.RecordError(err)
		b.span.SetStatus(codes.Error, "response body: "+err.Error())
	}
	if err != nil {
		b.span.End()
	}
	return n, err
}

func (b *spanBody) Close() error {
	err := b.ReadCloser.Close()
	b.span.End() // a second End is ignored
	return err
}
