package proxy

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/grpctest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution/executiontest"
)

// feedEnv is a gRPC env whose ledger's Watch sends "one" and "two", then
// "three" once hold is closed.
func feedEnv(t *testing.T, opts ...envOption) (e *grpcEnv, hold chan struct{}) {
	t.Helper()
	e = newGRPCEnv(t, opts...)
	e.ledger.Hold = make(chan struct{})
	return e, e.ledger.Hold
}

// watchUnderWay opens a Watch keyed feed-1 on ctx, sends its request and
// returns the stream once "one" and "two" have come.
func (e *grpcEnv) watchUnderWay(t *testing.T, ctx context.Context) grpc.ClientStream {
	t.Helper()
	ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", "feed-1")
	s, err := e.cc.NewStream(ctx, grpctest.WatchDesc, grpctest.Watch)
	if err != nil {
		t.Fatal(err)
	}
	in := []byte("x")
	if err := s.SendMsg(&in); err != nil {
		t.Fatal(err)
	}
	s.CloseSend()
	for _, want := range []string{"one", "two"} {
		var out []byte
		if err := s.RecvMsg(&out); err != nil || string(out) != want {
			t.Fatalf("stream gave %q, %v; want %q", out, err, want)
		}
	}
	return s
}

// A keyed server stream looks unary until its second message. One whose
// client left goes on detached, as any call, and ends released, counted
// as passthrough among the detached calls that ended.
func TestGRPCServerStreamDetachedFromItsClientEndsCountedAsPassthrough(t *testing.T) {
	e, hold := feedEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	e.watchUnderWay(t, ctx)
	cancel() // the client leaves, the stream under way
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if n := testutil.ToFloat64(e.proxy.metrics.detached); n != 1 {
			return fmt.Errorf("%v calls detached, want 1", n)
		}
		return nil
	})
	close(hold)
	ended := e.proxy.metrics.detachedEnded.WithLabelValues(defaultRoute, string(OutcomePassthrough))
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if n := testutil.ToFloat64(ended); n != 1 {
			return fmt.Errorf("%v detached calls ended passthrough, want 1", n)
		}
		return nil
	})
}

// A keyed call whose request looks unary may be a server stream, whose
// messages go to its client as they come: an answer under way when the
// client's wait (upstream.timeout, or its grpc-timeout) passes is not cut,
// and the call stays with its client until it ends, the client leaves or
// max_execution passes. Only a call that has not answered yet gets
// DEADLINE_EXCEEDED at its wait.
func TestGRPCAnswerUnderWayIsNotCutAtTheClientsWait(t *testing.T) {
	e, hold := feedEnv(t, func(o *Options) { o.UpstreamTimeout, o.MaxExecution = testTimeout, testMaxExecution })
	clock := executiontest.NewFakeClock()
	e.proxy.clock = clock
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := e.watchUnderWay(t, ctx)
	got := []string{"one", "two"}
	clock.Advance(testTimeout) // the client's wait passes, the stream under way
	close(hold)
	for {
		var out []byte
		err := s.RecvMsg(&out)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %q: %v; want the stream to its end", got, err)
		}
		got = append(got, string(out))
	}
	if strings.Join(got, ",") != "one,two,three" {
		t.Fatalf("stream gave %q, want one,two,three", got)
	}
	if n := testutil.ToFloat64(e.proxy.metrics.requests.WithLabelValues(defaultRoute, string(OutcomePassthrough))); n != 1 {
		t.Errorf("outcome passthrough counted %v times, want 1", n)
	}
}
