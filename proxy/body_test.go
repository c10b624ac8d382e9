package proxy

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
)

// TestForwardedRequestIsOneWrite checks that a keyed request, whose body
// the proxy holds in memory, reaches the upstream in one write: headers and
// body together. The transport flushes the headers on their own unless it
// recognises the body as in memory, which costs a syscall on each side for
// every forwarded request.
func TestForwardedRequestIsOneWrite(t *testing.T) {
	var writes writeCounter
	e := newEnv(t, nil, func(o *Options) {
		tr := NewTransport()
		dial := tr.DialContext
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &countingConn{Conn: c, writes: &writes}, nil
		}
		o.Transport = tr
	})
	body := `{"amount":2000,"currency":"eur"}`
	for i, key := range []string{"k1", "k2", "k3"} {
		writes.reset()
		r := e.do(t, "POST", "/charges", key, body)
		if r.StatusCode != http.StatusCreated {
			t.Fatalf("request %d: status %d %s", i, r.StatusCode, r.body)
		}
		if got := writes.get(); got != 1 {
			t.Errorf("request %d reached the upstream in %d writes, want 1: headers and body apart", i, got)
		}
	}
}

type writeCounter struct {
	mu sync.Mutex
	n  int
}

func (w *writeCounter) add()     { w.mu.Lock(); w.n++; w.mu.Unlock() }
func (w *writeCounter) reset()   { w.mu.Lock(); w.n = 0; w.mu.Unlock() }
func (w *writeCounter) get() int { w.mu.Lock(); defer w.mu.Unlock(); return w.n }

// countingConn counts the writes made on a connection to the upstream.
type countingConn struct {
	net.Conn
	writes *writeCounter
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.add()
	return c.Conn.Write(p)
}
