package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// targetRequest renders a raw HTTP/1.1 request with any method and target,
// a JSON body, and extra header lines.
func targetRequest(method, target, key string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: shop.example\r\nContent-Type: application/json\r\nConnection: close\r\n", method, target)
	if key != "" {
		b.WriteString("Idempotency-Key: " + key + "\r\n")
	}
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("Content-Length: 2\r\n\r\n{}")
	return b.String()
}

// TestEverySpellingOfAPathOrMethodGetsItsRoutesPolicy sends, on real
// sockets to the built binary, the spellings of POST /v1/charges that once
// went through a require_key route without a key: each is refused, with
// missing-key under the route's policy or ambiguous-path where an
// upstream may read the path two ways, and the upstream is never called.
func TestEverySpellingOfAPathOrMethodGetsItsRoutesPolicy(t *testing.T) {
	up := startUpstream(t)
	cfg := proxyConfig{
		Upstream:        up.URL(),
		UpstreamTimeout: 10 * time.Second,
		Memory:          true,
		Routes: []routeConfig{
			{Match: "POST /v1/charges", Keys: map[string]string{"require_key": "true", "path_case": "insensitive"}},
			{Match: "/internal/", Keys: map[string]string{"enabled": "false"}},
		},
	}
	p := startProxy(t, "paths", cfg)
	addr := strings.TrimPrefix(p.URL(), "http://")

	for _, c := range []struct {
		name, method, target string
		extra                []string
		want                 string
	}{
		{"encoded slash", "POST", "/v1%2Fcharges", nil, "ambiguous-path"},
		{"path parameter", "POST", "/v1/charges;x", nil, "ambiguous-path"},
		{"upper-case path, path_case insensitive", "POST", "/V1/charges", nil, "missing-key"},
		{"encoded dot segment out of a disabled route", "POST", "/internal/%2e%2e/v1/charges", nil, "missing-key"},
		{"lower-case method", "post", "/v1/charges", nil, "missing-key"},
		{"GET with a method override", "GET", "/v1/charges", []string{"X-HTTP-Method-Override: POST"}, "missing-key"},
		{"a trailing slash", "POST", "/v1/charges/", nil, "missing-key"},
		{"a format suffix", "POST", "/v1/charges.json", nil, "missing-key"},
		{"a format suffix then a trailing slash", "POST", "/v1/charges.json/", nil, "missing-key"},
		{"GET with a method override in underscores", "GET", "/v1/charges", []string{"X_HTTP_METHOD_OVERRIDE: POST"}, "missing-key"},
		{"an encoded trailing space", "POST", "/v1/charges%20", nil, "ambiguous-path"},
		{"an encoded path parameter", "POST", "/v1/charges%3Bx", nil, "ambiguous-path"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := exchange(t, addr, targetRequest(c.method, c.target, "", c.extra...))
			if r.Status != http.StatusBadRequest || !strings.Contains(r.Body, "/problems/"+c.want+`"`) {
				t.Errorf("%s %s: %d %s, want 400 %s", c.method, c.target, r.Status, r.Body, c.want)
			}
		})
	}
	if n := up.Total(); n != 0 {
		t.Fatalf("the upstream executed %d requests without a key", n)
	}
	// With a key, a spelling is the route's operation: once, and replayed
	// under another spelling.
	first := exchange(t, addr, targetRequest("POST", "/internal/%2e%2e/v1/charges", "ch-1"))
	again := exchange(t, addr, targetRequest("POST", "/v1/%63harges", "ch-1"))
	if first.Status != http.StatusCreated || again.Header.Get("Idempotent-Replayed") != "true" || again.Body != first.Body {
		t.Fatalf("first %d, retry %d replayed=%q; want one execution and its replay", first.Status, again.Status, again.Header.Get("Idempotent-Replayed"))
	}
	up.onlyExecution(t, "ch-1")
}

// TestMethodOverridesThatDisagreeAreRefused sends, on real sockets to the
// built binary, GET requests whose method-override headers name POST in
// one reading and GET in another — two header names, a list, two lines —
// to a route that requires a key on POST: an upstream may apply either,
// so each is refused with 400 ambiguous-method, and the upstream is never
// called. Overrides that disagree on methods no route protects are the
// upstream's business and go through.
func TestMethodOverridesThatDisagreeAreRefused(t *testing.T) {
	up := startUpstream(t)
	p := startProxy(t, "overrides", proxyConfig{
		Upstream: up.URL(),
		Memory:   true,
		Defaults: map[string]string{"methods": "[POST]"},
		Routes:   []routeConfig{{Match: "POST /v1/charges", Keys: map[string]string{"require_key": "true"}}},
	})
	addr := strings.TrimPrefix(p.URL(), "http://")
	for _, c := range []struct {
		name  string
		extra []string
	}{
		{"X-HTTP-Method names POST", []string{"X-HTTP-Method-Override: GET", "X-HTTP-Method: POST"}},
		{"X-Method-Override names POST", []string{"X-HTTP-Method-Override: GET", "X-Method-Override: POST"}},
		{"a list, POST first", []string{"X-HTTP-Method-Override: POST, GET"}},
		{"a list, POST last", []string{"X-HTTP-Method-Override: GET, POST"}},
		{"two lines, GET then POST", []string{"X-HTTP-Method-Override: GET", "X-HTTP-Method-Override: POST"}},
		{"underscores name POST", []string{"X-HTTP-Method-Override: GET", "X_HTTP_METHOD_OVERRIDE: POST"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := exchange(t, addr, targetRequest("GET", "/v1/charges", "", c.extra...))
			if r.Status != http.StatusBadRequest || r.Problem() != "ambiguous-method" {
				t.Errorf("%d %s, want 400 ambiguous-method", r.Status, r.Body)
			}
		})
	}
	if n := up.Total(); n != 0 {
		t.Fatalf("the upstream executed %d requests without a key", n)
	}
	r := exchange(t, addr, targetRequest("GET", "/v1/charges", "", "X-HTTP-Method-Override: GET, HEAD"))
	if r.Status != http.StatusOK && r.Status != http.StatusCreated {
		t.Errorf("GET with overrides naming GET and HEAD: %d %s, want forwarded", r.Status, r.Body)
	}
}
