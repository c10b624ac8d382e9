package proxy

import (
	"net/http"
	"strings"
	"testing"
)

// The recorded size is headers plus body. Over max_response_body the body
// is omitted; when the headers alone are over it, only the status and
// Content-Type are kept. The retry is a replay either way.
func TestResponseHeadersCountTowardTheRecordLimit(t *testing.T) {
	for name, tc := range map[string]struct {
		header, body int
		wantHeader   bool // the big header is replayed
	}{
		"headers and body over the limit": {header: 600, body: 600, wantHeader: true},
		"headers alone over the limit":    {header: 2000, body: 10, wantHeader: false},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				w.Header().Set("X-Big", strings.Repeat("h", tc.header))
				w.Write([]byte(strings.Repeat("b", tc.body)))
			}, withPolicy(func(p *Policy) { p.MaxResponseBody = 1024 }))
			first := e.do(t, "POST", "/x", "k", "{}")
			if len(first.body) != tc.body || len(first.Header.Get("X-Big")) != tc.header {
				t.Fatalf("first caller got %d body bytes and a %d-byte header, want all", len(first.body), len(first.Header.Get("X-Big")))
			}
			r := e.do(t, "POST", "/x", "k", "{}")
			if !r.replayed() || r.StatusCode != http.StatusOK || r.body != "" || r.Header.Get("Idempotent-Body-Omitted") != "true" {
				t.Fatalf("retry: %d replayed=%v omitted=%q body %d bytes; want the status without the body",
					r.StatusCode, r.replayed(), r.Header.Get("Idempotent-Body-Omitted"), len(r.body))
			}
			if got := r.Header.Get("X-Big") != ""; got != tc.wantHeader {
				t.Errorf("big header replayed = %v, want %v", got, tc.wantHeader)
			}
			if got := r.Header.Get("Content-Type"); got != "text/plain" {
				t.Errorf("Content-Type = %q, want text/plain", got)
			}
			if e.up.calls.Load() != 1 {
				t.Fatalf("executions = %d, want 1", e.up.calls.Load())
			}
		})
	}
}

// A response whose headers exceed the transport's MaxResponseHeaderBytes
// fails after the upstream executed the request. A retry would execute
// again and fail again, so the 502 is kept even under
// on_upstream_error: release.
func TestResponseHeaderOverTransportLimitIsNotExecutedTwice(t *testing.T) {
	tr := NewTransport()
	tr.MaxResponseHeaderBytes = 16 << 10
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Huge", strings.Repeat("h", 32<<10))
		w.Write([]byte("done"))
	}, func(o *Options) { o.Transport = tr })
	first := e.do(t, "POST", "/x", "k", "{}")
	if first.StatusCode != http.StatusBadGateway || first.problemType() != "upstream-failed" {
		t.Fatalf("first: %d %s, want 502 upstream-failed", first.StatusCode, first.body)
	}
	r := e.do(t, "POST", "/x", "k", "{}")
	if !r.replayed() || r.StatusCode != http.StatusBadGateway {
		t.Fatalf("retry: %d replayed=%v, want the recorded 502", r.StatusCode, r.replayed())
	}
	if got := e.up.calls.Load(); got != 1 {
		t.Fatalf("executions = %d, want 1", got)
	}
}

// Headers that fill max_response_body exactly, with no body, are a record
// of exactly the limit: recorded whole. One byte more and only the status
// and Content-Type are kept.
func TestResponseHeadersOfExactlyTheRecordLimitAreRecordedWhole(t *testing.T) {
	const limit = 1024
	// What the record counts of each field: name, value, ": " and CRLF.
	contentType := len("Content-Type") + len("text/plain") + 4
	for name, over := range map[string]int{"exactly the limit": 0, "one byte over": 1} {
		t.Run(name, func(t *testing.T) {
			pad := strings.Repeat("h", limit-contentType-len("X-Pad")-4+over)
			e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
				h := w.Header()
				h["Date"] = nil // not sent: the record holds the two fields alone
				h.Set("Content-Type", "text/plain")
				h.Set("X-Pad", pad)
				w.WriteHeader(http.StatusCreated)
			}, withPolicy(func(p *Policy) { p.MaxResponseBody = limit }))
			e.do(t, "POST", "/x", "k", "{}")
			r := e.do(t, "POST", "/x", "k", "{}")
			if !r.replayed() || r.StatusCode != http.StatusCreated || e.up.calls.Load() != 1 {
				t.Fatalf("retry: %d replayed=%v after %d executions, want the recorded 201", r.StatusCode, r.replayed(), e.up.calls.Load())
			}
			whole := over == 0
			omitted := r.Header.Get("Idempotent-Body-Omitted") == "true"
			if got := r.Header.Get("X-Pad") == pad; got != whole || omitted == whole {
				t.Errorf("%d bytes of headers, limit %d: X-Pad replayed %v, body omitted %v; want the headers kept %v", limit+over, limit, got, omitted, whole)
			}
		})
	}
}
