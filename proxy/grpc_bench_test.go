package proxy

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/grpcwire"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// grpcUpstream answers every call with one message and the trailers
// grpc-status: code, as a gRPC server does.
type grpcUpstream struct{ code string }

func (u grpcUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	return &http.Response{
		StatusCode: http.StatusOK, Proto: "HTTP/2.0", ProtoMajor: 2,
		Header:        http.Header{"Content-Type": {grpcwire.ContentType}},
		ContentLength: -1,
		Body:          io.NopCloser(bytes.NewReader([]byte{0, 0, 0, 0, 2, 'o', 'k'})),
		Trailer:       http.Header{grpcwire.StatusField: {u.code}, "X-Ledger-Entry": {"1"}},
		Request:       r,
	}, nil
}

// flushingWriter is a discardWriter that flushes, as a server's does, so
// that trailers reach it.
type flushingWriter struct{ discardWriter }

func (*flushingWriter) Flush() {}

// BenchmarkHandlerGRPCReleased is a unary gRPC call answered UNAVAILABLE,
// a status of release_grpc_statuses: delivered, its key released.
func BenchmarkHandlerGRPCReleased(b *testing.B) { benchmarkGRPC(b, "14") }

// BenchmarkHandlerGRPCMiss is a unary gRPC call answered OK and recorded.
func BenchmarkHandlerGRPCMiss(b *testing.B) { benchmarkGRPC(b, "0") }

func benchmarkGRPC(b *testing.B, code string) {
	st := memory.New(memory.Options{})
	b.Cleanup(func() { st.Close() })
	h, err := New(Options{
		Upstream:  &url.URL{Scheme: "http", Host: "upstream.invalid"},
		Transport: grpcUpstream{code: code},
		Store:     st,
	})
	if err != nil {
		b.Fatal(err)
	}
	w := &flushingWriter{discardWriter{header: http.Header{}}}
	body := &reusableBody{}
	msg := []byte{0, 0, 0, 0, 3, 'a', 'b', 'c'}
	loopMisses(b, func(key string) int {
		r, _ := http.NewRequest(http.MethodPost, "http://proxy.invalid/test.Ledger/Charge", nil)
		r.ProtoMajor, r.ProtoMinor, r.Proto = 2, 0, "HTTP/2.0"
		r.Header["Content-Type"] = []string{grpcwire.ContentType}
		r.Header["Idempotency-Key"] = []string{key}
		body.Reset(msg)
		r.Body, r.ContentLength = body, -1
		w.reset()
		h.ServeHTTP(w, r)
		return w.status
	})
}
