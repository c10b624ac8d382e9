package proxy

import (
	"net"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// An upstream that never answers the connection — its host down behind a
// firewall that drops packets — is given up after the transport's dial
// timeout: the client gets 502 upstream-unreachable and the key is
// released (docs/request-handling.md), before upstream.timeout would have
// answered 504 with the call going on detached. The connection is made
// to hang on a listener whose backlog is full: Linux drops the SYNs it
// cannot queue. The test waits out the real dial timeout, 5 s.
func TestUpstreamThatNeverAcceptsIsUnreachableBeforeTheClientsWait(t *testing.T) {
	t.Parallel() // its 5 s pass beside the other tests
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	filler, err := net.Dial("tcp", addr) // fills the backlog; never accepted
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { filler.Close() })

	e := newEnv(t, nil, func(o *Options) {
		o.Upstream.Host = addr
		o.UpstreamTimeout = 30 * time.Second
	})
	r := e.do(t, "POST", "/x", "k", "{}")
	if r.StatusCode != http.StatusBadGateway || r.problemType() != "upstream-unreachable" {
		t.Fatalf("got %d %s, want 502 upstream-unreachable", r.StatusCode, r.body)
	}
}
