package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"

	"github.com/idempotency-proxy/idempotency-proxy/config"
	"github.com/idempotency-proxy/idempotency-proxy/proxy"
	"github.com/idempotency-proxy/idempotency-proxy/tracing"
)

// tracingShutdownTimeout bounds exporting the last spans at exit, after
// the requests have drained: an unreachable collector must not hold the
// process up.
const tracingShutdownTimeout = 5 * time.Second

// tracer is the process's tracing, nil when tracing.enabled is false. Its
// methods then change nothing, so the handler runs unwrapped.
type tracer struct {
	p   *tracing.Provider
	log *slog.Logger
}

// startTracing sets up the OTLP exporter from the OTEL_* variables when
// tracing is enabled (docs/tracing.md).
func startTracing(c config.Tracing, log *slog.Logger) (*tracer, error) {
	if !c.Enabled {
		return nil, nil
	}
	// The SDK reports export failures through the global error handler,
	// which prints plain lines on stderr by default.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing", "error", err)
	}))
	// Its own logger (an endpoint it cannot parse) writes plain lines too.
	otel.SetLogger(logr.New(otelSink{log: log}))
	p, err := tracing.NewProvider(context.Background(), buildVersion())
	if err != nil {
		return nil, err
	}
	log.Info("tracing enabled", "protocol", p.Protocol())
	return &tracer{p: p, log: log}, nil
}

// wrap traces opts' store operations and upstream calls, and has the
// handler report each request's outcome to its span.
func (t *tracer) wrap(opts *proxy.Options) {
	if t == nil {
		return
	}
	tr := t.p.Tracer()
	if opts.Transport == nil {
		opts.Transport = proxy.NewTransportFor(opts.UpstreamProtocol)
	}
	opts.Transport = tr.Transport(opts.Transport)
	opts.Store = tr.Store(opts.Store)
	opts.Observe = tr.Observe
}

// handler returns h with a server span per request.
func (t *tracer) handler(h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	return t.p.Tracer().Handler(h)
}

// stop exports the spans still queued, within tracingShutdownTimeout.
func (t *tracer) stop() {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
	defer cancel()
	if err := t.p.Shutdown(ctx); err != nil {
		t.log.Warn("tracing: could not export the last spans", "error", err)
	}
}

// otelSink is the OpenTelemetry SDK's logger: its errors become "tracing"
// warnings, as those of its error handler do, with the SDK's message as
// detail; its info and debug chatter is dropped.
type otelSink struct {
	log    *slog.Logger
	values []any
}

var _ logr.LogSink = otelSink{}

func (otelSink) Init(logr.RuntimeInfo) {}

func (otelSink) Enabled(int) bool { return false }

func (otelSink) Info(int, string, ...any) {}

func (s otelSink) Error(err error, msg string, kv ...any) {
	args := append([]any{"error", err, "detail", msg}, s.values...)
	s.log.Warn("tracing", append(args, kv...)...)
}

func (s otelSink) WithValues(kv ...any) logr.LogSink {
	s.values = append(s.values[:len(s.values):len(s.values)], kv...)
	return s
}

func (s otelSink) WithName(string) logr.LogSink { return s }
