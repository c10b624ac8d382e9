package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
)

// Keeping the transport from resending must not change what the upstream
// receives: a protected GET without a body still arrives without one — no
// Transfer-Encoding, no Content-Length.
func TestProtectedGetArrivesWithoutABody(t *testing.T) {
	var te []string
	var length int64
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		te, length = r.TransferEncoding, r.ContentLength
		w.Write([]byte("ok"))
	}, withPolicy(func(p *Policy) { p.Methods = append(p.Methods, http.MethodGet) }))
	if r := e.do(t, http.MethodGet, "/x", "k", ""); r.StatusCode != http.StatusOK {
		t.Fatalf("got %d %s", r.StatusCode, r.body)
	}
	if len(te) != 0 || length != 0 {
		t.Fatalf("upstream saw Transfer-Encoding %q, Content-Length %d; want neither", te, length)
	}
}

// net/http's Transport resends a request it deems replayable when a reused
// keep-alive connection breaks after the request was written: one carrying
// Idempotency-Key (golang/go#19943), and any GET, HEAD, OPTIONS or TRACE
// whose body it can rewind or which has none — methods a route may protect
// because the legacy upstream does not treat them as safe. The upstream
// here acts on the request and drops the connection; it is not idempotent:
// the proxy must never let the transport run it twice.
func TestTransportNeverResendsAfterWriting(t *testing.T) {
	for _, tt := range []struct{ name, method, body string }{
		{"POST", http.MethodPost, "{}"},
		{"GET", http.MethodGet, ""},
		{"GET with a body", http.MethodGet, `{"q":1}`},
		{"OPTIONS", http.MethodOptions, ""},
	} {
		// Forwarded with a lease, and without one when the store is down
		// and the route fails open: either way at most once.
		for _, storeDown := range []bool{false, true} {
			name := tt.name
			if storeDown {
				name += "/store down, fail open"
			}
			t.Run(name, func(t *testing.T) {
				var calls atomic.Int64
				st := newFlaky(t)
				e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
					io.ReadAll(r.Body)
					if r.URL.Path == "/warm" {
						w.Write([]byte("warm"))
						return
					}
					calls.Add(1)
					conn, _, err := http.NewResponseController(w).Hijack()
					if err == nil {
						conn.Close() // acted on it, then the connection broke
					}
				}, withStore(st), withPolicy(func(p *Policy) {
					p.Methods = append(p.Methods, tt.method)
					p.OnStoreError = FailOpen
				}))
				e.do(t, "POST", "/warm", "", "{}") // leaves an idle connection to reuse
				st.down.Store(storeDown)
				r := e.do(t, tt.method, "/x", "k", tt.body)
				if r.StatusCode != http.StatusBadGateway || r.problemType() != "upstream-failed" {
					t.Fatalf("got %d %s, want 502 upstream-failed", r.StatusCode, r.body)
				}
				if got := calls.Load(); got != 1 {
					t.Fatalf("upstream executions = %d, want 1: the transport resent the request", got)
				}
			})
		}
	}
}

// Over HTTP/1.1 the transport may send a request again when nothing of it
// reached a reused connection: the upstream never saw it. The proxy keeps
// that resend, which needs the request's body rewindable: a keyed POST
// whose reused connection breaks before its first byte is written goes out
// on a new connection and is executed once.
func TestRequestNothingOfWhichWasWrittenIsSentOnANewConnection(t *testing.T) {
	var calls, dials atomic.Int64
	var first *breakableConn
	tr := NewTransport()
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil || dials.Add(1) > 1 {
			return c, err
		}
		first = &breakableConn{Conn: c}
		return first, nil
	}
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		if r.URL.Path != "/warm" {
			calls.Add(1)
		}
		w.Write([]byte("ok"))
	}, func(o *Options) { o.Transport = tr })
	if r := e.do(t, "POST", "/warm", "", "{}"); r.StatusCode != http.StatusOK { // leaves an idle connection to reuse
		t.Fatalf("warm-up: got %d %s", r.StatusCode, r.body)
	}
	first.broken.Store(true)
	r := e.do(t, http.MethodPost, "/x", "k", `{"amount":1}`)
	if r.StatusCode != http.StatusOK || r.body != "ok" {
		t.Fatalf("got %d %s, want 200 ok", r.StatusCode, r.body)
	}
	if got := calls.Load(); got != 1 {
		t.Fatalf("upstream executions = %d, want 1", got)
	}
	if !first.failed.Load() || dials.Load() != 2 {
		t.Fatalf("reused connection failed: %v, connections dialled: %d; want the request sent on a second one after the first failed",
			first.failed.Load(), dials.Load())
	}
}

// breakableConn is a connection whose writes fail, writing nothing, once
// it is broken.
type breakableConn struct {
	net.Conn
	broken, failed atomic.Bool
}

func (c *breakableConn) Write(b []byte) (int, error) {
	if c.broken.Load() {
		c.failed.Store(true)
		return 0, errors.New("connection broke before the request was written")
	}
	return c.Conn.Write(b)
}
