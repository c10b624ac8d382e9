package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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
