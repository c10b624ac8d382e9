package proxy

import (
	"context"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/grpctest"
)

// TestGRPCStreamOutlivesTheListenersReadTimeout holds a bidirectional
// stream open past the listener's read timeout, which bounds a slow
// request body: over HTTP/2 that timeout runs per stream, from its start,
// and would end the request stream of every gRPC stream that lasts longer
// (docs/request-handling.md, gRPC). Keyed and unkeyed streams both pass
// through, so both are tried.
func TestGRPCStreamOutlivesTheListenersReadTimeout(t *testing.T) {
	const readTimeout = 200 * time.Millisecond
	for _, key := range []string{"", "k"} {
		t.Run("key "+key, func(t *testing.T) {
			e := newGRPCEnvServer(t, func(s *http.Server) { s.ReadTimeout = readTimeout })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if key != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", key)
			}
			s, err := e.cc.NewStream(ctx, grpctest.ChatDesc, grpctest.Chat)
			if err != nil {
				t.Fatal(err)
			}
			for i, m := range []string{"a", "b"} {
				if i > 0 {
					// The stream has lasted past the read timeout: the
					// time passing is what is tested.
					time.Sleep(2 * readTimeout)
				}
				b := []byte(m)
				if err := s.SendMsg(&b); err != nil {
					t.Fatalf("message %d: send: %v", i, err)
				}
				var out []byte
				if err := s.RecvMsg(&out); err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
				if string(out) != "echo:"+m {
					t.Fatalf("message %d: got %q, want %q", i, out, "echo:"+m)
				}
			}
			s.CloseSend()
			var out []byte
			if err := s.RecvMsg(&out); err == nil {
				t.Fatalf("after the client's end, got %q, want the stream's end", out)
			}
		})
	}
}
