package proxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/grpctest"
)

// chargeCompressed calls Charge with key and msg, the message compressed
// with gzip when gz is set.
func (e *grpcEnv) chargeCompressed(t *testing.T, key, msg string, gz bool) (string, metadata.MD, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", key)
	opts := []grpc.CallOption{}
	var header metadata.MD
	opts = append(opts, grpc.Header(&header))
	if gz {
		opts = append(opts, grpc.UseCompressor(gzip.Name))
	}
	in, reply := []byte(msg), []byte(nil)
	err := e.cc.Invoke(ctx, grpctest.Charge, &in, &reply, opts...)
	return string(reply), header, err
}

// A retry is the same call whether or not its message is compressed: the
// fingerprint covers a gzip-compressed message as its decompressed bytes,
// so a retry sent uncompressed (or compressed) after an attempt sent the
// other way gets the first answer, never payload-mismatch.
func TestGRPCRetryIsTheSameCallCompressedOrNot(t *testing.T) {
	msg := strings.Repeat("order-1 ", 64)
	for _, tt := range []struct {
		name          string
		first, second bool
	}{{"gzip then plain", true, false}, {"plain then gzip", false, true}} {
		t.Run(tt.name, func(t *testing.T) {
			e := newGRPCEnv(t)
			out1, _, err := e.chargeCompressed(t, "k", msg, tt.first)
			if err != nil || out1 != "charged:"+msg {
				t.Fatalf("first call: %q, %v", out1, err)
			}
			out2, h, err := e.chargeCompressed(t, "k", msg, tt.second)
			if err != nil || out2 != out1 {
				t.Fatalf("retry: %q, %v; want the first answer", out2, err)
			}
			if len(h["idempotent-replayed"]) != 1 {
				t.Errorf("retry's header %v, want idempotent-replayed", h)
			}
			if n := e.ledger.Executions.Load(); n != 1 {
				t.Fatalf("Charge executed %d times, want 1", n)
			}
		})
	}
}
