package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/faultnet"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/grpctest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
)

// retryServiceConfig is a gRPC client's own retry policy (gRFC A6): it
// retries a call that failed UNAVAILABLE — a connection lost before the
// answer came — or ABORTED, the proxy's in-flight, after the pushback the
// proxy sends.
const retryServiceConfig = `{"methodConfig": [{"name": [{"service": "test.Ledger"}], "retryPolicy": {
	"maxAttempts": 5, "initialBackoff": "0.05s", "maxBackoff": "0.5s", "backoffMultiplier": 2,
	"retryableStatusCodes": ["UNAVAILABLE", "ABORTED"]}}]}`

// grpcProxy starts the ledger, the built proxy in front of it over h2c
// (upstream.protocol: h2c) requiring a key, and a fault proxy in front of
// the proxy that can cut the client's connections. It returns a gRPC
// client with the retry policy above, connected through the fault proxy.
func grpcProxy(t *testing.T, redis bool) (*grpctest.Ledger, *faultnet.Proxy, *grpc.ClientConn, *proxyProc) {
	t.Helper()
	l := &grpctest.Ledger{}
	addr := grpctest.Serve(t, l)
	cfg := proxyConfig{
		Upstream:         "http://" + addr,
		UpstreamProtocol: "h2c",
		UpstreamTimeout:  10 * time.Second,
		ShutdownTimeout:  5 * time.Second,
		Memory:           !redis,
		Defaults:         map[string]string{"require_key": "true", "lock_ttl": "5s"},
	}
	if redis {
		cfg.RedisURL = redistest.Start(t).URL()
	}
	p := startProxy(t, "grpc", cfg)
	fault := faultnet.Start(t, strings.TrimPrefix(p.URL(), "http://"))
	cc, err := grpc.NewClient(fault.Addr(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(retryServiceConfig),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(grpctest.Codec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return l, fault, cc, p
}

func grpcCharge(ctx context.Context, cc *grpc.ClientConn, key, msg string, header *metadata.MD) (string, error) {
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", key)
	}
	in, out := []byte(msg), []byte(nil)
	opts := []grpc.CallOption{}
	if header != nil {
		opts = append(opts, grpc.Header(header))
	}
	err := cc.Invoke(ctx, grpctest.Charge, &in, &out, opts...)
	return string(out), err
}

// A gRPC server that commits a charge and whose answer is then lost to the
// client (its connection cut before the answer came) is retried by the
// client's own retry policy, with the same idempotency-key metadata: the
// proxy answers the retry ABORTED while the first call still runs, then
// replays its answer. The charge is executed once, and the client gets its
// answer. Without the proxy the retry would charge again.
func TestGRPCRetryAfterALostAnswerExecutesOnce(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			l, fault, cc, _ := grpcProxy(t, store == "redis")
			l.Committed, l.Release = make(chan struct{}, 1), make(chan struct{})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			type result struct {
				out    string
				header metadata.MD
				err    error
			}
			done := make(chan result, 1)
			go func() {
				var h metadata.MD
				out, err := grpcCharge(ctx, cc, "order-7", "card-1", &h)
				done <- result{out, h, err}
			}()
			select {
			case <-l.Committed:
			case <-ctx.Done():
				t.Fatal("the charge never reached the server")
			}
			fault.ResetAll() // the client's connection dies before the answer
			close(l.Release)
			var r result
			select {
			case r = <-done:
			case <-ctx.Done():
				t.Fatal("the call never returned")
			}
			if r.err != nil || r.out != "charged:card-1" {
				t.Fatalf("call = %q, %v; want the charge's answer", r.out, r.err)
			}
			if got := r.header["idempotent-replayed"]; len(got) != 1 || got[0] != "true" {
				t.Errorf("the answer's header %v: want idempotent-replayed: true (a retry got it)", r.header)
			}
			if n := l.Executions.Load(); n != 1 {
				t.Fatalf("the server charged %d times, want 1", n)
			}
		})
	}
}

// The proxy's refusals reach grpc-go as statuses it decodes, with the
// problem type in the message.
func TestGRPCRefusalsDecodeAsStatuses(t *testing.T) {
	l, _, cc, _ := grpcProxy(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := grpcCharge(ctx, cc, "k", "card-1", nil); err != nil {
		t.Fatal(err)
	}
	check := func(name string, err error, code codes.Code, problem string) {
		t.Helper()
		s := status.Convert(err)
		if s.Code() != code || !strings.HasPrefix(s.Message(), "https://idempotency-proxy.dev/problems/"+problem+": ") {
			t.Errorf("%s: %v, want %v %s", name, err, code, problem)
		}
	}
	_, err := grpcCharge(ctx, cc, "k", "card-2", nil)
	check("key reused for another charge", err, codes.FailedPrecondition, "payload-mismatch")
	_, err = grpcCharge(ctx, cc, "", "card-3", nil)
	check("no key", err, codes.InvalidArgument, "missing-key")
	_, err = grpcCharge(ctx, cc, strings.Repeat("k", 256), "card-4", nil)
	check("key too long", err, codes.InvalidArgument, "invalid-key")

	// A stream cannot be protected; this route requires a key.
	sctx := metadata.AppendToOutgoingContext(ctx, "idempotency-key", "chat-1")
	s, err := cc.NewStream(sctx, grpctest.ChatDesc, grpctest.Chat)
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("hello")
	s.SendMsg(&msg)
	var out []byte
	check("bidirectional stream", s.RecvMsg(&out), codes.Unimplemented, "streaming-call")
	if n := l.Executions.Load(); n != 1 {
		t.Fatalf("the server ran %d calls, want 1", n)
	}
}
