package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// DefaultServiceName is service.name unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES set it.
const DefaultServiceName = "idempotency-proxy"

// OTLP protocols, the values of OTEL_EXPORTER_OTLP_PROTOCOL.
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// Provider exports spans over OTLP through a batch span processor. The
// exporter reads its endpoint, headers, TLS and timeout from the standard
// OTEL_EXPORTER_OTLP_* variables, the SDK its sampler from
// OTEL_TRACES_SAMPLER(_ARG) and its batching from OTEL_BSP_*.
type Provider struct {
	sdk      *sdktrace.TracerProvider
	tracer   *Tracer
	protocol string
}

// NewProvider configures a Provider from the environment; version is
// service.version. It does not connect: an unreachable collector shows in
// export errors, not here.
func NewProvider(ctx context.Context, version string) (*Provider, error) {
	proto, err := Protocol(os.Getenv)
	if err != nil {
		return nil, err
	}
	exp, err := newExporter(ctx, proto)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	// Later sources win: the defaults, the SDK's own attributes, then
	// OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(DefaultServiceName), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil && !errors.Is(err, resource.ErrSchemaURLConflict) {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing: OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{sdk: sdk, tracer: New(sdk, version), protocol: proto}, nil
}

// Tracer is the Tracer whose spans p exports.
func (p *Provider) Tracer() *Tracer { return p.tracer }

// Protocol is the OTLP protocol p exports with.
func (p *Provider) Protocol() string { return p.protocol }

// Shutdown exports the spans still queued and stops the exporter, within
// ctx's deadline.
func (p *Provider) Shutdown(ctx context.Context) error { return p.sdk.Shutdown(ctx) }

// Protocol returns the OTLP protocol for traces:
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL, else
// http/protobuf. http/json is not supported.
func Protocol(getenv func(string) string) (string, error) {
	for _, name := range [...]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		switch v := strings.TrimSpace(getenv(name)); v {
		case "":
		case ProtocolHTTP, ProtocolGRPC:
			return v, nil
		default:
			return "", fmt.Errorf("tracing: %s=%q: want %s or %s", name, v, ProtocolHTTP, ProtocolGRPC)
		}
	}
	return ProtocolHTTP, nil
}

func newExporter(ctx context.Context, proto string) (sdktrace.SpanExporter, error) {
	if proto == ProtocolGRPC {
		return otlptracegrpc.New(ctx)
	}
	return otlptracehttp.New(ctx)
}
