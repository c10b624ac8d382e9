package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// A record stored without its body (here by a memory store too full for
// it) keeps the header the capture wrote, Content-Length included. Its
// replay still announces 0 bytes and sends none: docs/guarantees.md says
// duplicates get "Content-Length: 0" and an empty body.
func TestBodilessReplayAnnouncesNoContent(t *testing.T) {
	st := memory.New(memory.Options{MaxBytes: 2048, SweepInterval: -1})
	t.Cleanup(func() { st.Close() })
	big := strings.Repeat("x", 4000) // under max_response_body, over the store bound
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(big))
	}, withStore(st))

	first := e.do(t, "POST", "/x", "k", "{}")
	if first.body != big {
		t.Fatalf("first: got %d bytes, want %d", len(first.body), len(big))
	}

	res, err := e.srv.Client().Do(e.request(t, context.Background(), "/x", "k"))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if got := res.Header.Get("Idempotent-Body-Omitted"); got != "true" {
		t.Fatalf("Idempotent-Body-Omitted = %q, want true", got)
	}
	if cl := res.Header.Get("Content-Length"); cl != "0" || err != nil {
		t.Fatalf("replay of an omitted body: Content-Length=%q, read %d bytes, err=%v; want Content-Length 0 and a clean empty body", cl, len(b), err)
	}
}

// A request that never reached the upstream (the upstream timeout fired
// while the connection was still being dialled: the Transport returns the
// context error, not the dial *net.OpError) is not an ambiguous failure:
// even under on_upstream_error: keep, its key is released (docs/guarantees.md).
func TestTimeoutWhileDiallingReleasesKeyUnderKeep(t *testing.T) {
	var dials atomic.Int64
	var e *env
	tr := NewTransport()
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dials.Add(1) == 1 {
			<-ctx.Done() // a SYN into a black hole
			return nil, &net.OpError{Op: "dial", Net: network, Err: ctx.Err()}
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	e = newEnv(t, nil, func(o *Options) {
		o.Transport = tr
		o.UpstreamTimeout, o.MaxExecution = 100*time.Millisecond, 100*time.Millisecond
		o.Default.OnUpstreamError = UpstreamErrorKeep
	})
	first := e.do(t, "POST", "/x", "k", "{}")
	if first.StatusCode != http.StatusBadGateway {
		t.Fatalf("first: %d, want 502", first.StatusCode)
	}
	if e.up.calls.Load() != 0 {
		t.Fatal("upstream was reached")
	}
	r := e.do(t, "POST", "/x", "k", "{}")
	if r.replayed() || r.StatusCode != http.StatusCreated {
		t.Fatalf("retry: %d replayed=%v problem=%q; want a fresh execution: nothing was ever sent upstream", r.StatusCode, r.replayed(), r.problemType())
	}
}

// After Abort, a request that acquires a key has its upstream call cancelled
// before anything is sent: under keep too, no "outcome unknown" 502 is
// recorded, and the key is released, not left locked.
func TestAbortBeforeSendReleasesKeyUnderKeep(t *testing.T) {
	e := newEnv(t, nil, withPolicy(func(p *Policy) { p.OnUpstreamError = UpstreamErrorKeep }))
	e.handler.Abort()
	e.do(t, "POST", "/x", "k", "{}")
	if e.up.calls.Load() != 0 {
		t.Fatal("upstream was reached after Abort")
	}
	res, err := e.store.Begin(context.Background(), e.keyHash(t, "k"), store.Lease{}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.State != store.Acquired {
		t.Fatalf("after a request never sent upstream the key is %s, want it free (released)", res.State)
	}
}

// Outside an http.Server (no http.ServerContextKey in the request context,
// e.g. the handler embedded in another framework or driven with an
// httptest.ResponseRecorder), httputil.ReverseProxy does not panic when the
// upstream body is cut short: it just returns. The body received must still
// not be recorded as the whole response.
func TestCutShortBodyIsNotRecordedOutsideAServer(t *testing.T) {
	var calls atomic.Int64
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Length", "100")
		w.Write([]byte("partial"))
		http.NewResponseController(w).Flush()
		conn, _, _ := http.NewResponseController(w).Hijack()
		conn.Close()
	})
	serve := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/x", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "k")
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		func() {
			defer func() { recover() }()
			e.handler.ServeHTTP(rec, req)
		}()
		return rec
	}
	serve()
	second := serve()
	if second.Header().Get("Idempotent-Replayed") == "true" {
		t.Fatalf("a cut-short response was recorded and replayed: %d %q (Content-Length %s)",
			second.Code, second.Body.String(), second.Header().Get("Content-Length"))
	}
}

// rawUpstream serves each connection one request, answered with the bytes
// of answer as they are, and counts the requests it read.
func rawUpstream(t *testing.T, answer string, calls *atomic.Int64) *url.URL {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				calls.Add(1)
				io.WriteString(c, answer)
			}()
		}
	}()
	return &url.URL{Scheme: "http", Host: ln.Addr().String()}
}

// An upstream that answers HTTP/1.x that net/http cannot read (a control
// byte in a header value, a header line without a colon, conflicting
// lengths, a malformed status code, a transfer coding it does not know)
// has executed the request, and would answer a retry the same way: its 502
// is recorded whatever on_upstream_error says, as for headers over the
// transport's limit. An answer cut inside its header section is a lost
// answer, and one without an HTTP/1.x status line comes from a peer that
// does not speak HTTP: on_upstream_error (release) frees the key.
func TestMalformedAnswerIsNotExecutedTwice(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		recorded     bool // its 502 is recorded, else the key is released
	}{
		{"control byte in a value", "HTTP/1.1 201 Created\r\nX-Ref: a\x01b\r\nContent-Length: 2\r\n\r\nok", true},
		{"line without a colon", "HTTP/1.1 201 Created\r\nX-Ref\r\nContent-Length: 2\r\n\r\nok", true},
		{"two lengths", "HTTP/1.1 201 Created\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok", true},
		{"length not a number", "HTTP/1.1 201 Created\r\nContent-Length: two\r\n\r\nok", true},
		{"status not a number", "HTTP/1.1 2x1 Created\r\nContent-Length: 2\r\n\r\nok", true},
		{"unknown transfer encoding", "HTTP/1.1 201 Created\r\nTransfer-Encoding: gzip\r\n\r\nok", true},
		{"cut inside the header section", "HTTP/1.1 201 Created\r\nX-Ref: a", false},
		{"no status line", "+PONG\r\n", false},
		{"version not HTTP", "RTSP/1.0 200 OK\r\n\r\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			e := newEnv(t, nil, func(o *Options) { o.Upstream = rawUpstream(t, tc.answer, &calls) })
			first := e.do(t, "POST", "/x", "k", "{}")
			if tc.recorded && (first.StatusCode != http.StatusBadGateway || first.problemType() != "upstream-failed") {
				t.Fatalf("first: %d %s, want 502 upstream-failed", first.StatusCode, first.body)
			}
			r := e.do(t, "POST", "/x", "k", "{}")
			if !tc.recorded {
				if r.replayed() || calls.Load() != 2 {
					t.Fatalf("retry: %d replayed=%v after %d executions, want the key released and executed again", r.StatusCode, r.replayed(), calls.Load())
				}
			} else if !r.replayed() || r.StatusCode != http.StatusBadGateway || calls.Load() != 1 {
				t.Fatalf("retry: %d replayed=%v after %d executions, want the recorded 502 after 1", r.StatusCode, r.replayed(), calls.Load())
			}
		})
	}
}
