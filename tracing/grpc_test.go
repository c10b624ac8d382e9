package tracing

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// A gRPC call's server span names its system and method, and the HTTP/2
// it came over; an HTTP/2 request that is not gRPC names no method.
func TestGRPCCallSpanNamesItsMethod(t *testing.T) {
	sink := newSpanSink()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sink))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	tr := New(tp, "test")
	srv := httptest.NewUnstartedServer(tr.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	})))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	c := srv.Client()
	c.Transport.(*http.Transport).Protocols = srv.Config.Protocols
	for _, ct := range []string{"application/grpc", "application/json"} {
		res, err := c.Post(srv.URL+"/bank.Ledger/Charge", ct, bytes.NewReader([]byte{0, 0, 0, 0, 0}))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	spans := sink.waitFor(t, "both calls", func(s []sdktrace.ReadOnlySpan) bool { return len(serverSpans(s)) == 2 })
	for i, sp := range serverSpans(spans) {
		system, hasSystem := attr(sp, semconv.RPCSystemNameKey)
		method, _ := attr(sp, semconv.RPCMethodKey)
		version, _ := attr(sp, semconv.NetworkProtocolVersionKey)
		if version.AsString() != "2" {
			t.Errorf("span %d: network.protocol.version %q, want 2", i, version.AsString())
		}
		grpc := i == 0
		if hasSystem != grpc || grpc && (system.AsString() != "grpc" || method.AsString() != "bank.Ledger/Charge") {
			t.Errorf("span %d (gRPC %v): rpc.system.name %q, rpc.method %q", i, grpc, system.AsString(), method.AsString())
		}
	}
}
