package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
)

// wireEnv is one proxy with a 1 KiB request body limit, for tests that
// speak raw HTTP/1.1 to it.
type wireEnv struct {
	up *upstream
	p  *proxyProc
}

func startWire(t *testing.T) wireEnv {
	t.Helper()
	srv := redistest.Start(t)
	up := startUpstream(t)
	return wireEnv{up: up, p: startProxy(t, "wire", withPolicy(baseConfig(up, srv.URL()), "max_request_body", "1KiB"))}
}

// post renders a raw POST with the given extra header lines and body.
func post(key string, extra []string, body string) string {
	var b strings.Builder
	b.WriteString("POST /v1/orders HTTP/1.1\r\nHost: wire.test\r\nContent-Type: application/json\r\n")
	if key != "" {
		b.WriteString("Idempotency-Key: " + key + "\r\n")
	}
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	return b.String()
}

// dial opens a raw connection to the proxy, closed at the end of the test.
func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
	return conn, bufio.NewReader(conn)
}

// readReply reads one response from br.
func readReply(t *testing.T, br *bufio.Reader) reply {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read response body: %v", err)
	}
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: string(body)}
}

// exchange writes raw and reads one response.
func exchange(t *testing.T, addr, raw string) reply {
	t.Helper()
	conn, br := dial(t, addr)
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatalf("write: %v", err)
	}
	return readReply(t, br)
}

// TestWireBadKeys sends keys net/http clients would not: the proxy answers
// 400 invalid-key and never calls the upstream; valid raw and quoted forms
// name the same key.
func TestWireBadKeys(t *testing.T) {
	t.Parallel()
	env := startWire(t)
	addr := env.p.listen
	long := strings.Repeat("k", 255)
	for _, tc := range []struct {
		name    string
		headers []string // Idempotency-Key lines
		want    int
	}{
		{"255 bytes", []string{"Idempotency-Key: " + long}, http.StatusCreated},
		{"256 bytes", []string{"Idempotency-Key: " + long + "x"}, http.StatusBadRequest},
		{"256 bytes quoted", []string{`Idempotency-Key: "` + long + `x"`}, http.StatusBadRequest},
		{"unterminated quote", []string{`Idempotency-Key: "abc`}, http.StatusBadRequest},
		{"bad escape", []string{`Idempotency-Key: "a\x"`}, http.StatusBadRequest},
		{"junk after quote", []string{`Idempotency-Key: "abc" junk`}, http.StatusBadRequest},
		{"list", []string{`Idempotency-Key: "a", "b"`}, http.StatusBadRequest},
		{"two lines", []string{"Idempotency-Key: a1", "Idempotency-Key: a2"}, http.StatusBadRequest},
		{"non-UTF-8", []string{"Idempotency-Key: k\xff\xfe"}, http.StatusBadRequest},
		{"non-UTF-8 quoted", []string{"Idempotency-Key: \"k\xc3\x28\""}, http.StatusBadRequest},
		{"empty quoted", []string{`Idempotency-Key: ""`}, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := env.up.Total()
			r := exchange(t, addr, post("", tc.headers, `{"n":1}`))
			if r.Status != tc.want {
				t.Fatalf("status %s, want %d", r, tc.want)
			}
			if tc.want == http.StatusBadRequest && r.Problem() != "invalid-key" {
				t.Errorf("problem %q, want invalid-key", r.Problem())
			}
			if got, want := env.up.Total()-before, map[bool]int{true: 1}[tc.want == http.StatusCreated]; got != want {
				t.Errorf("upstream executions %d, want %d", got, want)
			}
		})
	}
	t.Run("quoted and raw are one key", func(t *testing.T) {
		first := exchange(t, addr, post("same-key", nil, "{}"))
		second := exchange(t, addr, post(`"same-key"`, nil, "{}"))
		ex := env.up.onlyExecution(t, "same-key")
		if first.Body != ex.Body || !second.Replayed() || second.Body != ex.Body {
			t.Errorf("raw then quoted: %s, %s; want one execution and its replay", first, second)
		}
	})
}

// TestWireBodies covers bodies over max_request_body (declared or
// chunked), a body that arrives slowly but completes, and
// Expect: 100-continue with a body under and over the limit.
func TestWireBodies(t *testing.T) {
	t.Parallel()
	env := startWire(t)
	addr := env.p.listen
	big := strings.Repeat("b", 2048)

	t.Run("declared too large", func(t *testing.T) {
		r := exchange(t, addr, post("big-declared", nil, big))
		if r.Status != http.StatusRequestEntityTooLarge || r.Problem() != "body-too-large" {
			t.Errorf("got %s, want 413 body-too-large", r)
		}
		if n := env.up.Count("big-declared"); n != 0 {
			t.Errorf("executions %d, want 0", n)
		}
	})
	t.Run("chunked too large", func(t *testing.T) {
		raw := "POST /v1/orders HTTP/1.1\r\nHost: wire.test\r\nIdempotency-Key: big-chunked\r\nTransfer-Encoding: chunked\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(big), big)
		r := exchange(t, addr, raw)
		if r.Status != http.StatusRequestEntityTooLarge {
			t.Errorf("got %s, want 413", r)
		}
		if n := env.up.Count("big-chunked"); n != 0 {
			t.Errorf("executions %d, want 0", n)
		}
		// Nothing was locked: the same key with a small body executes.
		if r := exchange(t, addr, post("big-chunked", nil, "{}")); r.Status != http.StatusCreated {
			t.Errorf("same key, small body: %s, want 201", r)
		}
	})
	t.Run("slow body", func(t *testing.T) {
		body := strings.Repeat("s", 50)
		conn, br := dial(t, addr)
		head := post("slow-body", nil, body)
		head = head[:len(head)-len(body)]
		if _, err := io.WriteString(conn, head); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(body); i += 10 {
			time.Sleep(150 * time.Millisecond) // the fault: a slow client
			if _, err := io.WriteString(conn, body[i:i+10]); err != nil {
				t.Fatal(err)
			}
		}
		r := readReply(t, br)
		ex := env.up.onlyExecution(t, "slow-body")
		if r.Status != http.StatusCreated || r.Body != ex.Body || !strings.Contains(ex.Body, body) {
			t.Errorf("slow body: %s %q, want 201 with the whole body executed once", r, r.Body)
		}
	})
	t.Run("expect 100-continue", func(t *testing.T) {
		conn, br := dial(t, addr)
		body := `{"expect":true}`
		head := post("expect-ok", []string{"Expect: 100-continue"}, body)
		if _, err := io.WriteString(conn, head[:len(head)-len(body)]); err != nil {
			t.Fatal(err)
		}
		if r := readReply(t, br); r.Status != http.StatusContinue {
			t.Fatalf("first response %s, want 100 Continue", r)
		}
		if _, err := io.WriteString(conn, body); err != nil {
			t.Fatal(err)
		}
		r := readReply(t, br)
		ex := env.up.onlyExecution(t, "expect-ok")
		if r.Status != http.StatusCreated || r.Body != ex.Body {
			t.Errorf("after 100: %s, want 201 %q", r, ex.Body)
		}
	})
	t.Run("expect 100-continue too large", func(t *testing.T) {
		conn, br := dial(t, addr)
		head := post("expect-big", []string{"Expect: 100-continue"}, big)
		if _, err := io.WriteString(conn, head[:len(head)-len(big)]); err != nil {
			t.Fatal(err)
		}
		if r := readReply(t, br); r.Status != http.StatusRequestEntityTooLarge {
			t.Errorf("got %s, want 413 without a 100 Continue and without reading the body", r)
		}
		if n := env.up.Count("expect-big"); n != 0 {
			t.Errorf("executions %d, want 0", n)
		}
	})
}

// TestWireConnection covers HTTP/1.1 pipelining and a header section over
// MaxHeaderBytes.
func TestWireConnection(t *testing.T) {
	t.Parallel()
	env := startWire(t)
	addr := env.p.listen

	t.Run("pipelining", func(t *testing.T) {
		conn, br := dial(t, addr)
		raw := post("piped", nil, `{"p":1}`) + post("piped", nil, `{"p":1}`) + post("piped-2", nil, `{"p":2}`)
		if _, err := io.WriteString(conn, raw); err != nil {
			t.Fatal(err)
		}
		first, second, third := readReply(t, br), readReply(t, br), readReply(t, br)
		ex := env.up.onlyExecution(t, "piped")
		if first.Status != http.StatusCreated || first.Replayed() || first.Body != ex.Body {
			t.Errorf("first pipelined: %s, want a fresh 201 %q", first, ex.Body)
		}
		if !second.Replayed() || second.Body != ex.Body {
			t.Errorf("second pipelined: %s, want the replay of %q", second, ex.Body)
		}
		if ex2 := env.up.onlyExecution(t, "piped-2"); third.Body != ex2.Body {
			t.Errorf("third pipelined: %s %q, want %q", third, third.Body, ex2.Body)
		}
	})
	t.Run("huge header count", func(t *testing.T) {
		var b strings.Builder
		b.WriteString("POST /v1/orders HTTP/1.1\r\nHost: wire.test\r\nIdempotency-Key: many-headers\r\n")
		for i := range 40000 {
			fmt.Fprintf(&b, "X-Filler-%05d: %s\r\n", i, "vvvvvvvvvvvv")
		}
		b.WriteString("Content-Length: 2\r\n\r\n{}")
		conn, br := dial(t, addr)
		// The server answers before reading everything; write concurrently.
		go func() { _, _ = io.WriteString(conn, b.String()) }()
		if r := readReply(t, br); r.Status != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("got %s, want 431", r)
		}
		if n := env.up.Count("many-headers"); n != 0 {
			t.Errorf("executions %d, want 0", n)
		}
	})
}

// TestWireHeaderNeverCompletes opens a connection whose header section
// never ends: the proxy's ReadHeaderTimeout (10s) must close it. It runs in
// parallel with the other wire tests, since it mostly waits.
func TestWireHeaderNeverCompletes(t *testing.T) {
	t.Parallel()
	env := startWire(t)
	conn, br := dial(t, env.p.listen)
	if _, err := io.WriteString(conn, "POST /v1/orders HTTP/1.1\r\nHost: wire.test\r\nIdempotency-Key: slowloris"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := br.ReadByte()
	if err == nil || time.Since(start) > 13*time.Second {
		t.Errorf("connection with an unfinished header: read returned %v after %v, want it closed within ReadHeaderTimeout",
			err, time.Since(start))
	}
	if n := env.up.Count("slowloris"); n != 0 {
		t.Errorf("executions %d, want 0", n)
	}
}
