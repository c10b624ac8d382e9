package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
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

// TestCookieKeyReadTwoWaysIsRefused runs the built binary with a cookie
// key on a require_key route and sends the Cookie headers whose key
// net/http and Python's http.cookies read apart: "sid=c1, sid=c2" is
// c1, sid=c2 to one and c2 to the other, so a key taken from it may name
// another operation than the upstream runs. Each is refused with 400
// invalid-key and never forwarded; the plain cookie is a key.
func TestCookieKeyReadTwoWaysIsRefused(t *testing.T) {
	up := startUpstream(t)
	p := startProxy(t, "cookie-key", proxyConfig{
		Upstream: up.URL(),
		Memory:   true,
		Routes: []routeConfig{
			{Match: "POST /v1/charges", Keys: map[string]string{"key_sources": `["cookie:sid"]`, "require_key": "true"}},
		},
	})
	addr := strings.TrimPrefix(p.URL(), "http://")
	for _, cookie := range []string{"sid=c1, sid=c2", "sid=c1 sid=c2", "sid=c1,c2", "sid= c2"} {
		r := exchange(t, addr, rawRequest("/v1/charges", "shop.example", "", "{}", "Cookie: "+cookie))
		if r.Status != http.StatusBadRequest || r.Problem() != "invalid-key" {
			t.Errorf("Cookie: %s: %d %s, want 400 invalid-key", cookie, r.Status, r.Body)
		}
	}
	if n := up.Total(); n != 0 {
		t.Fatalf("the upstream executed %d requests keyed by a cookie it reads otherwise", n)
	}
	first := exchange(t, addr, rawRequest("/v1/charges", "shop.example", "", "{}", "Cookie: sid=c2"))
	again := exchange(t, addr, rawRequest("/v1/charges", "shop.example", "", "{}", "Cookie: sid=c2"))
	if first.Status != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("Cookie: sid=c2: %d then %d replayed=%q, want executed then replayed", first.Status, again.Status, again.Header.Get("Idempotent-Replayed"))
	}
}

// TestCookieScopeReadTwoWaysIsRefused runs the built binary with keys
// scoped by the cookie sid and sends a key with "sid=c1, sid=c2", which
// net/http reads as the session "c1, sid=c2" and Python's http.cookies as
// c2: the scope would not be the session the upstream acts for, and c2's
// own retry would run the key again under another scope. It is refused
// with 400 invalid-key and never forwarded; the plain cookie scopes the
// key.
func TestCookieScopeReadTwoWaysIsRefused(t *testing.T) {
	up := startUpstream(t)
	p := startProxy(t, "cookie-scope", proxyConfig{
		Upstream: up.URL(),
		Memory:   true,
		Defaults: map[string]string{"scope_headers": `["Cookie:sid"]`},
	})
	addr := strings.TrimPrefix(p.URL(), "http://")
	for _, cookie := range []string{"sid=c1, sid=c2", "sid=c1 sid=c2", "sid= c2"} {
		r := exchange(t, addr, rawRequest("/v1/orders", "shop.example", "ord-1", "{}", "Cookie: "+cookie))
		if r.Status != http.StatusBadRequest || r.Problem() != "invalid-key" {
			t.Errorf("Cookie: %s: %d %s, want 400 invalid-key", cookie, r.Status, r.Body)
		}
	}
	if n := up.Total(); n != 0 {
		t.Fatalf("the upstream executed %d requests scoped by a cookie it reads otherwise", n)
	}
	first := exchange(t, addr, rawRequest("/v1/orders", "shop.example", "ord-1", "{}", "Cookie: sid=c2"))
	again := exchange(t, addr, rawRequest("/v1/orders", "shop.example", "ord-1", "{}", "Cookie: sid=c2"))
	if first.Status != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("Cookie: sid=c2: %d then %d replayed=%q, want executed then replayed", first.Status, again.Status, again.Header.Get("Idempotent-Replayed"))
	}
	up.onlyExecution(t, "ord-1")
}
