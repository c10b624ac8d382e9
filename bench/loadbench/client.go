package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// client is one keep-alive HTTP/1.1 connection that sends the benchmark's
// request and reads each response with net/http's parser. It stands in for
// http.Client on purpose: on a 2-core machine the load generator shares the
// CPU with what it measures, and http.Client's two goroutines per
// connection and per-request hand-offs cost it 60–100 µs of CPU per
// request — as much as a replay costs the proxy — which flattened every
// ratio. This client costs a fraction of that, like wrk would.
type client struct {
	addr string // host:port
	conn net.Conn
	br   *bufio.Reader
	buf  []byte
	stop func() bool // unregisters the close-on-cancel hook
}

// newClient returns a client for base ("http://127.0.0.1:N"); it dials on
// first use. Cancelling ctx closes the connection, which ends a blocked
// request at once.
func newClient(base string) (*client, error) {
	addr, ok := strings.CutPrefix(base, "http://")
	if !ok {
		return nil, fmt.Errorf("base %q: want http://host:port", base)
	}
	return &client{addr: addr, buf: make([]byte, 0, 512)}, nil
}

func (c *client) dial(ctx context.Context) error {
	conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return err
	}
	c.conn = conn
	if c.br == nil {
		c.br = bufio.NewReaderSize(conn, 16<<10)
	} else {
		c.br.Reset(conn)
	}
	c.stop = context.AfterFunc(ctx, func() { conn.Close() })
	return nil
}

// close closes the connection, if any.
func (c *client) close() {
	if c.conn != nil {
		c.stop()
		c.conn.Close()
		c.conn = nil
	}
}

// errReplay means a response's Idempotent-Replayed header was not what the
// scenario implies, so the path measured is not the one named.
var errReplay = errors.New("unexpected replay state")

// do POSTs requestBody to /v1/charges with key (none when empty), reads the
// whole response, and checks it is a 2xx whose replay marker matches want.
func (c *client) do(ctx context.Context, key string, want expect) error {
	if c.conn == nil {
		if err := c.dial(ctx); err != nil {
			return err
		}
	}
	_ = c.conn.SetDeadline(time.Now().Add(10 * time.Second))
	b := append(c.buf[:0], "POST /v1/charges HTTP/1.1\r\nHost: "...)
	b = append(b, c.addr...)
	b = append(b, "\r\nContent-Type: application/json\r\n"...)
	if key != "" {
		b = append(b, "Idempotency-Key: "...)
		b = append(b, key...)
		b = append(b, "\r\n"...)
	}
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(len(requestBody)), 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, requestBody...)
	c.buf = b
	if _, err := c.conn.Write(b); err != nil {
		c.close()
		return fmt.Errorf("writing request: %w", err)
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		c.close()
		return fmt.Errorf("reading response: %w", err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.Close {
		// The server ended the connection; the next request dials again.
		c.close()
	}
	if err != nil {
		return fmt.Errorf("reading response body: %w", err)
	}
	return check(resp, key, want)
}

func check(resp *http.Response, key string, want expect) error {
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("key %q: status %d, want 2xx", key, resp.StatusCode)
	}
	got := resp.Header.Get("Idempotent-Replayed") == "true"
	switch {
	case want == replayed && !got:
		return fmt.Errorf("key %q: %w: not replayed, want a replay", key, errReplay)
	case want == fresh && got:
		return fmt.Errorf("key %q: %w: replayed, want an execution", key, errReplay)
	}
	return nil
}
