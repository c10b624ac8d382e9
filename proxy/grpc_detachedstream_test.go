package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
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

// feedEnv is a gRPC env in front of test.Feed/Watch, a server stream that
// sends "one" and "two", then "three" once hold is closed.
func feedEnv(t *testing.T, opts ...envOption) (e *grpcEnv, watch *grpc.StreamDesc, hold chan struct{}) {
	t.Helper()
	hold = make(chan struct{})
	watch = &grpc.StreamDesc{StreamName: "Watch", ServerStreams: true, Handler: func(_ any, s grpc.ServerStream) error {
		var in []byte
		if err := s.RecvMsg(&in); err != nil {
			return err
		}
		for _, m := range []string{"one", "two"} {
			b := []byte(m)
			if err := s.SendMsg(&b); err != nil {
				return err
			}
		}
		<-hold
		b := []byte("three")
		return s.SendMsg(&b)
	}}
	srv := grpc.NewServer(grpc.ForceServerCodec(grpctest.Codec{}))
	srv.RegisterService(&grpc.ServiceDesc{ServiceName: "test.Feed", HandlerType: (*any)(nil), Streams: []grpc.StreamDesc{*watch}}, struct{}{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	opts = append([]envOption{func(o *Options) { o.Upstream = mustURL(t, "http://"+ln.Addr().String()) }}, opts...)
	return newGRPCEnv(t, opts...), watch, hold
}

// A keyed server stream looks unary until its second message. One whose
// client left goes on detached, as any call, and ends released, counted
// as passthrough among the detached calls that ended.
func TestGRPCServerStreamDetachedFromItsClientEndsCountedAsPassthrough(t *testing.T) {
	e, watch, hold := feedEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", "feed-1")
	s, err := e.cc.NewStream(ctx, watch, "/test.Feed/Watch")
	if err != nil {
		t.Fatal(err)
	}
	in := []byte("x")
	if err := s.SendMsg(&in); err != nil {
		t.Fatal(err)
	}
	s.CloseSend()
	for range 2 {
		var out []byte
		if err := s.RecvMsg(&out); err != nil {
			t.Fatal(err)
		}
	}
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
	e, watch, hold := feedEnv(t, func(o *Options) { o.UpstreamTimeout, o.MaxExecution = testTimeout, testMaxExecution })
	clock := executiontest.NewFakeClock()
	e.proxy.clock = clock
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", "feed-1")
	s, err := e.cc.NewStream(ctx, watch, "/test.Feed/Watch")
	if err != nil {
		t.Fatal(err)
	}
	in := []byte("x")
	if err := s.SendMsg(&in); err != nil {
		t.Fatal(err)
	}
	s.CloseSend()
	var got []string
	for len(got) < 2 {
		var out []byte
		if err := s.RecvMsg(&out); err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, string(out))
	}
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
