package tracing

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

func TestProtocolFollowsTheEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name          string
		traces, otlp  string
		want, wantErr string
	}{
		{name: "unset is http/protobuf", want: ProtocolHTTP},
		{name: "grpc", otlp: "grpc", want: ProtocolGRPC},
		{name: "http/protobuf", otlp: "http/protobuf", want: ProtocolHTTP},
		{name: "the traces variable wins", traces: "grpc", otlp: "http/protobuf", want: ProtocolGRPC},
		{name: "http/json is refused", otlp: "http/json", wantErr: `OTEL_EXPORTER_OTLP_PROTOCOL="http/json": want http/protobuf or grpc`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": tc.traces, "OTEL_EXPORTER_OTLP_PROTOCOL": tc.otlp}
			got, err := Protocol(func(k string) string { return env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Protocol = %q, %v, want %q", got, err, tc.want)
			}
		})
	}
}

// The exporter speaks the protocol OTEL_EXPORTER_OTLP_PROTOCOL names: each
// collector below understands only its own, and receives the span.
func TestProviderExportsWithTheConfiguredProtocol(t *testing.T) {
	for _, tc := range []struct {
		name, protocol string
		start          func(*testing.T) (endpoint string, got <-chan *coltracepb.ExportTraceServiceRequest)
		env            map[string]string
		service        string
	}{
		{name: "default", start: startHTTPCollector, service: DefaultServiceName},
		{name: "http/protobuf", protocol: ProtocolHTTP, start: startHTTPCollector,
			env:     map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attributes,deployment.environment.name=test"},
			service: "from-attributes"},
		{name: "grpc", protocol: ProtocolGRPC, start: startGRPCCollector,
			env:     map[string]string{"OTEL_SERVICE_NAME": "checkout-proxy", "OTEL_RESOURCE_ATTRIBUTES": "service.name=ignored"},
			service: "checkout-proxy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			endpoint, got := tc.start(t)
			for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
				"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER"} {
				t.Setenv(k, "")
			}
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", tc.protocol)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			ctx := context.Background()
			p, err := NewProvider(ctx, "v1.2.3")
			if err != nil {
				t.Fatal(err)
			}
			if want := tc.protocol; want != "" && p.Protocol() != want {
				t.Errorf("Protocol() = %q, want %q", p.Protocol(), want)
			}
			_, span := p.Tracer().tracer.Start(ctx, "probe")
			span.End()
			// Shutdown exports what the batch holds: nothing else flushes
			// within the test.
			if err := p.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			var req *coltracepb.ExportTraceServiceRequest
			select {
			case req = <-got:
			default:
				t.Fatal("the collector received nothing")
			}
			rs := req.GetResourceSpans()
			if len(rs) != 1 || len(rs[0].GetScopeSpans()) != 1 || len(rs[0].GetScopeSpans()[0].GetSpans()) != 1 {
				t.Fatalf("export = %v, want one span", req)
			}
			if name := rs[0].GetScopeSpans()[0].GetSpans()[0].GetName(); name != "probe" {
				t.Errorf("span %q, want probe", name)
			}
			res := map[string]string{}
			for _, kv := range rs[0].GetResource().GetAttributes() {
				res[kv.GetKey()] = kv.GetValue().GetStringValue()
			}
			if res["service.name"] != tc.service || res["service.version"] != "v1.2.3" {
				t.Errorf("resource service.name=%q service.version=%q, want %q v1.2.3", res["service.name"], res["service.version"], tc.service)
			}
		})
	}
}

// startHTTPCollector is an OTLP/HTTP trace receiver (protobuf only).
func startHTTPCollector(t *testing.T) (string, <-chan *coltracepb.ExportTraceServiceRequest) {
	got := make(chan *coltracepb.ExportTraceServiceRequest, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		req := &coltracepb.ExportTraceServiceRequest{}
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || err != nil || proto.Unmarshal(body, req) != nil {
			http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
			return
		}
		got <- req
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, got
}

type grpcCollector struct {
	coltracepb.UnimplementedTraceServiceServer
	got chan *coltracepb.ExportTraceServiceRequest
}

func (c *grpcCollector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.got <- req
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// startGRPCCollector is an OTLP/gRPC trace receiver without TLS.
func startGRPCCollector(t *testing.T) (string, <-chan *coltracepb.ExportTraceServiceRequest) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &grpcCollector{got: make(chan *coltracepb.ExportTraceServiceRequest, 16)}
	s := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(s, c)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return "http://" + l.Addr().String(), c.got
}
