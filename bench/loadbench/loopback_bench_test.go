//go:build linux

package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/proxy"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// BenchmarkLoopbackNoKey sends the load benchmark's no-key request, one at
// a time on one keep-alive connection, over real loopback sockets through
// a server and a handler to an upstream in the same process. The variants
// change one thing each against the plain proxy (the floor): the server's
// timeouts, full duplex, the product's handler. Everything else — the
// client, the upstream, the sockets — is the same in each, so under
// `valgrind --tool=callgrind` or `strace -c -f` the difference between two
// variants is what that one setting costs a request.
func BenchmarkLoopbackNoKey(b *testing.B) {
	for _, v := range loopbackVariants(b) {
		b.Run(v.name, func(b *testing.B) {
			c := dialLoopback(b, listen(b, v.server(v.handler(b))))
			c.roundTrip(b) // the upstream connection is open before timing
			b.ReportAllocs()
			for b.Loop() {
				c.roundTrip(b)
			}
		})
	}
}

// BenchmarkLoopbackNoKeyParallel is BenchmarkLoopbackNoKey under load:
// 8 connections per GOMAXPROCS send at once, so the scheduler has work
// queued and idle processors to wake, as in a load benchmark round.
func BenchmarkLoopbackNoKeyParallel(b *testing.B) {
	for _, v := range loopbackVariants(b) {
		b.Run(v.name, func(b *testing.B) {
			addr := listen(b, v.server(v.handler(b)))
			b.SetParallelism(8)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				c := dialLoopback(b, addr)
				for pb.Next() {
					c.roundTrip(b)
				}
			})
		})
	}
}

type loopbackVariant struct {
	name    string
	server  func(http.Handler) *http.Server
	handler func(*testing.B) http.Handler
}

// loopbackVariants are the floor and the floor with one setting of the
// product's each, then the product's handler behind each server, all
// forwarding to one upstream on loopback.
func loopbackVariants(b *testing.B) []loopbackVariant {
	upstream := listen(b, &http.Server{Handler: constantHandler(false)})
	u := &url.URL{Scheme: "http", Host: upstream}
	floor := func(*testing.B) http.Handler { return plainProxy(u) }
	product := func(b *testing.B) http.Handler {
		st := memory.New(memory.Options{})
		b.Cleanup(func() { st.Close() })
		h, err := proxy.New(proxy.Options{Upstream: u, Store: st})
		if err != nil {
			b.Fatal(err)
		}
		return h
	}
	duplex := func(*testing.B) http.Handler {
		rp := plainProxy(u)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_ = http.NewResponseController(w).EnableFullDuplex()
			rp.ServeHTTP(w, r)
		})
	}
	return []loopbackVariant{
		{"floor", plainServer, floor},
		{"floor+timeouts", productServer, floor},
		{"floor+duplex", plainServer, duplex},
		{"handler", plainServer, product},
		{"product", productServer, product},
	}
}

// loopbackConn is one client keep-alive connection sending the load
// benchmark's no-key request.
type loopbackConn struct {
	c   net.Conn
	br  *bufio.Reader
	req []byte
}

func dialLoopback(b *testing.B, addr string) *loopbackConn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return &loopbackConn{c: c, br: bufio.NewReader(c), req: appendRequest(nil, addr, "/v1/charges", "")}
}

func (c *loopbackConn) roundTrip(b *testing.B) {
	if _, err := c.c.Write(c.req); err != nil {
		b.Error(err)
		return
	}
	res, err := http.ReadResponse(c.br, nil)
	if err != nil {
		b.Error(err)
		return
	}
	if _, err := io.Copy(io.Discard, res.Body); err != nil {
		b.Error(err)
	}
	if res.StatusCode != http.StatusOK {
		b.Errorf("status %d, want 200", res.StatusCode)
	}
}

// listen serves srv on a loopback port until the benchmark ends and
// returns its address.
func listen(tb testing.TB, srv *http.Server) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go srv.Serve(l)
	tb.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}
