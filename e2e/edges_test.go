package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/redistest"
)

// rawRequest renders a raw HTTP/1.1 POST with target, Host and extra
// header lines, closing the connection after the answer.
func rawRequest(target, host, key, body string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nConnection: close\r\n", target, host)
	if key != "" {
		b.WriteString("Idempotency-Key: " + key + "\r\n")
	}
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	return b.String()
}

// TestEdgesDoNotOpenAHole sends, on real sockets to the built binary, the
// requests that once slipped past the key rules: an upgrade offer on a
// POST, the key named in Connection, the same key on another host.
func TestEdgesDoNotOpenAHole(t *testing.T) {
	srv := redistest.Start(t)
	up := startUpstream(t)
	p := startProxy(t, "edges", baseConfig(up, srv.URL()))
	addr := strings.TrimPrefix(p.URL(), "http://")

	t.Run("upgrade offer on a POST executes once", func(t *testing.T) {
		req := rawRequest("/v1/orders", "a.example", "h2c-1", "{}",
			"Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA")
		first := exchange(t, addr, req)
		again := exchange(t, addr, req)
		if first.Status != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "true" || again.Body != first.Body {
			t.Fatalf("first %d, retry %d replayed=%q; want one execution and its replay", first.Status, again.Status, again.Header.Get("Idempotent-Replayed"))
		}
		up.onlyExecution(t, "h2c-1")
	})
	t.Run("key named in Connection reaches the upstream", func(t *testing.T) {
		r := exchange(t, addr, rawRequest("/v1/orders", "a.example", "conn-1", "{}", "Connection: Idempotency-Key"))
		if r.Status != http.StatusCreated {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
		up.onlyExecution(t, "conn-1") // the upstream counts by the key it received
	})
	t.Run("same key on another host is a mismatch", func(t *testing.T) {
		first := exchange(t, addr, rawRequest("/v1/orders", "tenant-a.example", "host-1", "{}"))
		if r := exchange(t, addr, rawRequest("/v1/orders", "TENANT-A.example.", "host-1", "{}")); r.Body != first.Body {
			t.Fatalf("same host, other spelling: %d, want the replay", r.Status)
		}
		for _, req := range []string{
			rawRequest("/v1/orders", "tenant-b.example", "host-1", "{}"),
			rawRequest("http://tenant-b.example/v1/orders", "tenant-a.example", "host-1", "{}"),
		} {
			if r := exchange(t, addr, req); r.Status != http.StatusUnprocessableEntity || !strings.Contains(r.Body, "payload-mismatch") {
				t.Fatalf("another host: %d %s, want 422 payload-mismatch", r.Status, r.Body)
			}
		}
		up.onlyExecution(t, "host-1")
	})
}
