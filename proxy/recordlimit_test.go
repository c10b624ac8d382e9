package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// max_response_body is the most a record holds, headers and body together:
// a response of exactly that size is recorded whole, one byte more and its
// body is left out, whether the upstream declares its length or streams
// it.
func TestResponseOfExactlyTheRecordLimitIsRecordedWhole(t *testing.T) {
	const limit = 1024
	// What the record counts of the one header the upstream sends: name,
	// value, and ": " and CRLF as on the wire.
	headers := len("Content-Type") + len("text/plain") + 4
	for _, streamed := range []bool{false, true} {
		for name, body := range map[string]int{
			"one byte under the limit": limit - headers - 1,
			"exactly the limit":        limit - headers,
			"one byte over the limit":  limit - headers + 1,
		} {
			whole := headers+body <= limit
			mode := "declared length"
			if streamed {
				mode = "streamed"
			}
			t.Run(mode+", "+name, func(t *testing.T) {
				payload := strings.Repeat("b", body)
				e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
					h := w.Header()
					h["Date"] = nil // not sent: the record holds Content-Type alone
					h.Set("Content-Type", "text/plain")
					if streamed {
						w.(http.Flusher).Flush() // chunked, no length announced
					} else {
						h.Set("Content-Length", strconv.Itoa(body))
					}
					w.Write([]byte(payload))
				}, withPolicy(func(p *Policy) { p.MaxResponseBody = limit }))
				if first := e.do(t, "POST", "/x", "k", "{}"); first.body != payload {
					t.Fatalf("first caller got %d body bytes, want %d", len(first.body), body)
				}
				r := e.do(t, "POST", "/x", "k", "{}")
				if !r.replayed() || e.up.calls.Load() != 1 {
					t.Fatalf("retry: %d replayed=%v after %d executions, want a replay of the one", r.StatusCode, r.replayed(), e.up.calls.Load())
				}
				omitted := r.Header.Get("Idempotent-Body-Omitted") == "true"
				switch {
				case whole && (omitted || r.body != payload):
					t.Fatalf("%d bytes of headers and body, limit %d: replayed %d body bytes (omitted %v), want the whole body", headers+body, limit, len(r.body), omitted)
				case !whole && (!omitted || r.body != ""):
					t.Fatalf("%d bytes of headers and body, limit %d: replayed %d body bytes (omitted %v), want the body left out", headers+body, limit, len(r.body), omitted)
				}
			})
		}
	}
}
