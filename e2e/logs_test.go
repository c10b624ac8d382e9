package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// An upstream that writes a response nobody asked for on an idle keep-alive
// connection makes Go's transport complain through the standard log
// package. That line, like every other, must be JSON on stderr: log
// collectors drop or mangle anything else.
func TestStderrIsJSONEvenWhenTheTransportComplains(t *testing.T) {
	unsolicited := make(chan struct{})
	release := sync.OnceFunc(func() { close(unsolicited) })
	t.Cleanup(release) // no handler stays blocked if the test stops early
	addr := serveRawUpstream(t, func(conn net.Conn) {
		br := bufio.NewReader(conn)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")
		<-unsolicited
		io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		br.Peek(1) // hold the connection until the proxy closes it
	})
	p := startFlagsProxy(t, "--upstream", "http://"+addr)

	res, err := http.Post("http://"+p.listen+"/v1/charges", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	release() // the connection is idle in the proxy's pool now
	waitOutput(t, p.Process, p.Stderr, "Unsolicited response received on idle HTTP channel")

	for i, line := range strings.Split(strings.TrimSpace(p.Stderr()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("stderr line %d is not JSON: %q", i+1, line)
		}
	}
}

// serveRawUpstream accepts connections on a free loopback port and hands
// each to handle, for upstreams that misbehave below what net/http allows.
func serveRawUpstream(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				handle(conn)
			}()
		}
	}()
	return ln.Addr().String()
}
