package proxy

import (
	"context"
	"maps"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// keptAs is a store that keeps each record as keep changes it: a record
// another writer kept, or one a store gives back other than it was sent.
// keep may also just look at the record.
type keptAs struct {
	Store
	keep func(*store.Record)
}

func (k keptAs) Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	kept := *rec
	k.keep(&kept)
	return k.Store.Complete(ctx, key, token, &kept, ttl)
}

// A kept trailer field with no value the wire can carry is sent as no
// field at all. Go's HTTP/2 server, left such a field as the only
// trailer, writes no trailer section and never ends the stream
// (golang/net#31, never merged): a retry would wait for the answer's end
// until its deadline. The replay ends its stream instead, a gRPC client
// reading a status-less answer as grpc-go does (INTERNAL), and a field
// that can be sent beside it still is.
func TestReplayEndsItsStreamWhateverItsKeptTrailers(t *testing.T) {
	for _, tt := range []struct {
		name    string
		trailer map[string][]string
		want    codes.Code
	}{
		{"a grpc-status without a value", map[string][]string{"Grpc-Status": {}}, codes.Internal},
		{"a grpc-status the wire cannot carry", map[string][]string{"Grpc-Status": {"0\n"}}, codes.Internal},
		{"an empty field beside a grpc-status", map[string][]string{"Grpc-Status": {"0"}, "X-Audit": nil}, codes.OK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := keptAs{Store: newFlaky(t), keep: func(rec *store.Record) { rec.Trailer = tt.trailer }}
			e := newGRPCEnv(t, withStore(st))
			if _, _, _, err := e.charge(t, "k", "m"); err != nil {
				t.Fatalf("first call: %v", err)
			}
			// charge bounds the call by a deadline: a replay that never
			// ends fails it as DEADLINE_EXCEEDED.
			out, h, _, err := e.charge(t, "k", "m")
			if got := status.Code(err); got != tt.want {
				t.Fatalf("retry: %v, want %v", err, tt.want)
			}
			if len(h["idempotent-replayed"]) != 1 || out != "charged:m" {
				t.Fatalf("retry: message %q, header %v; want the replay of the recorded message", out, h)
			}
			if n := e.ledger.Executions.Load(); n != 1 {
				t.Fatalf("%d executions, want 1", n)
			}
		})
	}
}

// A record whose trailers hold nothing a replay sends is replayed as one
// without trailers: its length announced, over HTTP/1.1 not chunked for
// trailers that never follow. A trailer it does send keeps the answer
// chunked, the trailer after the body.
func TestReplayWithNoTrailerToSendAnnouncesItsLength(t *testing.T) {
	for _, tt := range []struct {
		name    string
		trailer map[string][]string
		sent    bool
	}{
		{"a field without a value", map[string][]string{"X-Audit": {}}, false},
		{"a value the wire cannot carry", map[string][]string{"X-Audit": {"a\nb"}}, false},
		{"a field replay_exclude_headers names", map[string][]string{"Set-Cookie": {"session=1"}}, false},
		{"a name no trailer may have", map[string][]string{"Content-Length": {"5"}}, false},
		{"a field it sends", map[string][]string{"X-Audit": {"ok"}}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := keptAs{Store: newFlaky(t), keep: func(rec *store.Record) {
				// Recorded as an answer with trailers is: without a length.
				rec.Header = maps.Clone(rec.Header)
				delete(rec.Header, "Content-Length")
				rec.Trailer = tt.trailer
			}}
			e := newEnv(t, nil, withStore(st))
			first := e.do(t, "POST", "/x", "k", "{}")
			r := e.do(t, "POST", "/x", "k", "{}")
			if !r.replayed() || r.body != first.body {
				t.Fatalf("retry: replayed=%v body %q, want the replay of %q", r.replayed(), r.body, first.body)
			}
			if tt.sent {
				if r.ContentLength != -1 || r.Trailer.Get("X-Audit") != "ok" {
					t.Fatalf("length %d, trailer %v; want no length and the trailer after the body", r.ContentLength, r.Trailer)
				}
				return
			}
			if r.ContentLength != int64(len(first.body)) || len(r.Trailer) != 0 {
				t.Fatalf("length %d, trailer %v; want the body's length %d and no trailer", r.ContentLength, r.Trailer, len(first.body))
			}
		})
	}
}
