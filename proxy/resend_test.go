package proxy

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
)

// net/http's Transport resends GET, HEAD, OPTIONS and TRACE requests on
// its own when a reused keep-alive connection breaks after the request was
// written, whatever their headers say. A route may protect these methods
// (a legacy API whose GET or OPTIONS has side effects): the proxy must not
// let the transport execute such a keyed request twice.
func TestProtectedGetIsNeverResentByTheTransport(t *testing.T) {
	for _, method := range []string{http.MethodGet, http.MethodOptions} {
		t.Run(method, func(t *testing.T) {
			var calls atomic.Int64
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
			}, withPolicy(func(p *Policy) { p.Methods = append(p.Methods, method) }))
			e.do(t, "POST", "/warm", "", "{}") // leaves an idle connection to reuse
			r := e.do(t, method, "/x", "k", "")
			if r.StatusCode != http.StatusBadGateway {
				t.Errorf("got %d %s, want 502", r.StatusCode, r.body)
			}
			if got := calls.Load(); got != 1 {
				t.Fatalf("upstream executions = %d, want 1: the transport resent the %s", got, method)
			}
		})
	}
}

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
