// Package grpctest is a gRPC service for tests, registered by hand over
// grpc-go with a codec that carries messages as raw bytes, so that tests
// need no generated code: Ledger's Charge is a unary call that counts its
// executions, Watch a server stream and Chat a bidirectional one.
package grpctest

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Codec carries messages as they are: a message is a *[]byte.
type Codec struct{}

func (Codec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (Codec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}
func (Codec) Name() string { return "raw" }

// Method paths of the Ledger service.
const (
	Charge = "/test.Ledger/Charge"
	Watch  = "/test.Ledger/Watch"
	Chat   = "/test.Ledger/Chat"
)

// Ledger is the service. Charge answers "charged:" and the request, with
// the trailer x-ledger-entry: its execution's number.
type Ledger struct {
	// Executions counts the calls of every method that ran.
	Executions atomic.Int64
	// Answer, when set, decides Charge's status once it has executed.
	Answer func(ctx context.Context) error
	// Committed, when set, receives after each execution of Charge, and
	// Charge then waits for Release (when set) before it answers.
	Committed chan struct{}
	Release   chan struct{}
	// Hold, when set, keeps Watch open after its two messages until it is
	// closed; Watch then sends a third, "three", and ends.
	Hold chan struct{}
}

// Desc registers Ledger on a grpc.Server.
var Desc = grpc.ServiceDesc{
	ServiceName: "test.Ledger",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Charge", Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		l := srv.(*Ledger)
		var in []byte
		if err := dec(&in); err != nil {
			return nil, err
		}
		n := l.Executions.Add(1)
		if l.Committed != nil {
			l.Committed <- struct{}{}
		}
		if l.Release != nil {
			<-l.Release
		}
		grpc.SetTrailer(ctx, metadata.Pairs("x-ledger-entry", strconv.FormatInt(n, 10)))
		if l.Answer != nil {
			if err := l.Answer(ctx); err != nil {
				return nil, err
			}
		}
		out := append([]byte("charged:"), in...)
		return &out, nil
	}}},
	Streams: []grpc.StreamDesc{
		{StreamName: "Watch", ServerStreams: true, Handler: func(srv any, s grpc.ServerStream) error {
			l := srv.(*Ledger)
			l.Executions.Add(1)
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
			if l.Hold == nil {
				return nil
			}
			<-l.Hold
			b := []byte("three")
			return s.SendMsg(&b)
		}},
		{StreamName: "Chat", ClientStreams: true, ServerStreams: true, Handler: func(srv any, s grpc.ServerStream) error {
			srv.(*Ledger).Executions.Add(1)
			for {
				var in []byte
				if err := s.RecvMsg(&in); err != nil {
					return nil
				}
				out := append([]byte("echo:"), in...)
				if err := s.SendMsg(&out); err != nil {
					return err
				}
			}
		}},
	},
}

// WatchDesc and ChatDesc are the streams' descriptions, for NewStream.
var (
	WatchDesc = &Desc.Streams[0]
	ChatDesc  = &Desc.Streams[1]
)

// Serve starts a gRPC server with l on a free loopback port, stopped when
// the test ends, and returns its address.
func Serve(t testing.TB, l *Ledger) string {
	t.Helper()
	srv := grpc.NewServer(grpc.ForceServerCodec(Codec{}))
	srv.RegisterService(&Desc, l)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}
