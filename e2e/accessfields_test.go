package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// clientFrom is an HTTP client whose connections come from the loopback
// address ip: a second peer for the proxy on one machine.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		}}}
}

// The binary writes the access fields access_log_fields chooses and no
// others; client_addr takes X-Forwarded-For only from a peer in
// trusted_proxies (the rightmost hop not trusted, never what the client
// wrote left of it) and is the peer's address for any other peer;
// upstream_seconds is on a request that went upstream only, request_id
// only on one that sent X-Request-Id.
func TestAccessLogWritesTheChosenFields(t *testing.T) {
	up := startUpstream(t)
	p := startProxy(t, "access-fields", proxyConfig{Upstream: up.URL(), Memory: true,
		Extra: "access_log_fields: [status, outcome, upstream_seconds, client_addr, user_agent, request_id]\n" +
			"trusted_proxies: [127.0.0.1, 10.0.0.0/8]\n"})
	send := func(c *http.Client, key, requestID string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, p.URL()+"/v1/charges", strings.NewReader(`{"amount":1}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "e2e-agent/1")
		req.Header.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.4, 10.1.2.3")
		if requestID != "" {
			req.Header.Set("X-Request-Id", requestID)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	trusted, untrusted := clientFrom("127.0.0.1"), clientFrom("127.0.0.2")
	send(trusted, "fields-1", "req-e2e-1")
	send(untrusted, "fields-2", "req-e2e-2")
	send(trusted, "fields-1", "")

	var lines []map[string]any
	wait.SucceedsSoon(t, 30*time.Second, func() error {
		if lines = p.logLines(map[string]string{"msg": "access"}); len(lines) < 3 {
			return fmt.Errorf("%d access lines on stderr, want 3", len(lines))
		}
		return nil
	})
	if len(lines) != 3 {
		t.Fatalf("%d access lines, want 3:\n%s", len(lines), p.Logs())
	}
	want := []string{
		"executed 198.51.100.4 e2e-agent/1 req-e2e-1 upstream",
		"executed 127.0.0.2 e2e-agent/1 req-e2e-2 upstream",
		"replayed 198.51.100.4 e2e-agent/1 <nil> <nil>",
	}
	for i, l := range lines {
		upstream := any(nil)
		if s, ok := l["upstream_seconds"].(float64); ok && s > 0 {
			upstream = "upstream"
		}
		got := fmt.Sprintf("%v %v %v %v %v", l["outcome"], l["client_addr"], l["user_agent"], l["request_id"], upstream)
		if got != want[i] {
			t.Errorf("access line %d: %s\nwant %s\n(%v)", i, got, want[i], l)
		}
		for _, k := range []string{"method", "path", "route", "duration_seconds", "bytes", "key_hash"} {
			if _, ok := l[k]; ok {
				t.Errorf("access line %d has %s, which was not chosen: %v", i, k, l)
			}
		}
	}
}

// The access_log_fields example of docs/operating.md ("Logs") runs as it
// is: the line has exactly the fields it lists, and, the test's client not
// being one of its trusted proxies, the client's own X-Forwarded-For is
// ignored.
func TestOperatingDocsAccessFieldsExample(t *testing.T) {
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "operating.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := yamlBlock(t, markdownSection(t, string(doc), "Logs"))
	_, list, _ := strings.Cut(block, "access_log_fields: [")
	list, _, _ = strings.Cut(list, "]")
	fields := strings.Split(list, ", ")

	up := startUpstream(t)
	p := startProxy(t, "access-fields-doc", proxyConfig{Upstream: up.URL(), Memory: true, Extra: block})
	req, err := http.NewRequest(http.MethodPost, p.URL()+"/v1/charges", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", "doc-1")
	req.Header.Set("X-Request-Id", "doc-req")
	req.Header.Set("X-Forwarded-For", "6.6.6.6")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()

	var lines []map[string]any
	wait.SucceedsSoon(t, 30*time.Second, func() error {
		if lines = p.logLines(map[string]string{"msg": "access"}); len(lines) == 0 {
			return errors.New("no access line on stderr yet")
		}
		return nil
	})
	l := lines[0]
	want := append([]string{"time", "level", "msg"}, fields...)
	var got []string
	for k := range l {
		got = append(got, k)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("access line keys %v, want %v (the example's): %v", got, want, l)
	}
	if l["client_addr"] != "127.0.0.1" {
		t.Errorf("client_addr %v from an untrusted peer, want the peer's 127.0.0.1: its X-Forwarded-For believed", l["client_addr"])
	}
}
