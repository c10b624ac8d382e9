// Package faultnet is a TCP proxy for tests that injects the faults a
// network does between a client and a server: added latency, every
// connection reset at once, new connections refused (accepted and reset).
package faultnet

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy in front of a server (Redis, Postgres, the proxy)
// that injects the faults a network does.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	latency time.Duration
	refuse  bool
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// Start listens on a free loopback port and forwards to target until the
// test ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fault proxy listen: %v", err)
	}
	f := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.close)
	return f
}

// Addr is the host:port clients should dial instead of the target.
func (f *Proxy) Addr() string { return f.ln.Addr().String() }

// SetLatency delays every chunk of data in both directions by d.
func (f *Proxy) SetLatency(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency = d
}

// Refuse makes new connections be reset as soon as they are accepted.
func (f *Proxy) Refuse(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = on
}

// ResetAll resets every open connection (both sides see ECONNRESET).
func (f *Proxy) ResetAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		reset(c)
		delete(f.conns, c)
	}
}

func (f *Proxy) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	_ = f.ln.Close()
	f.ResetAll()
	f.wg.Wait()
}

func (f *Proxy) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		refuse, closed := f.refuse, f.closed
		f.mu.Unlock()
		if refuse || closed {
			reset(c)
			continue
		}
		f.wg.Add(1)
		go f.pipe(c)
	}
}

// pipe connects one client to the target, copying both ways until either
// side closes; then it closes both.
func (f *Proxy) pipe(client net.Conn) {
	defer f.wg.Done()
	server, err := net.DialTimeout("tcp", f.target, time.Second)
	if err != nil {
		reset(client)
		return
	}
	if !f.track(client, server) {
		reset(client)
		reset(server)
		return
	}
	var both sync.WaitGroup
	both.Add(2)
	go func() { defer both.Done(); f.copy(server, client) }()
	go func() { defer both.Done(); f.copy(client, server) }()
	both.Wait()
	f.mu.Lock()
	delete(f.conns, client)
	delete(f.conns, server)
	f.mu.Unlock()
}

func (f *Proxy) track(conns ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	for _, c := range conns {
		f.conns[c] = struct{}{}
	}
	return true
}

// copy moves data from src to dst, delaying each chunk by the current
// latency. When either side fails, both are closed so the other copy ends.
func (f *Proxy) copy(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			f.mu.Lock()
			d := f.latency
			f.mu.Unlock()
			if d > 0 {
				time.Sleep(d) // the injected fault: a slow network
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				reset(dst)
			}
			return
		}
	}
}

// reset closes c with SO_LINGER 0, so the peer gets an RST rather than a
// clean FIN, like a crashed host or a middlebox dropping state.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
