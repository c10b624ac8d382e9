package client

import (
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/proxy"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// startProxy serves the real proxy handler with an in-memory store in front
// of upstream, under the default policy changed by edit (if not nil), and
// returns its base URL.
func startProxy(t *testing.T, upstream string, edit func(*proxy.Policy)) string {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New(memory.Options{})
	t.Cleanup(func() { _ = st.Close() })
	pol := proxy.DefaultPolicy()
	if edit != nil {
		edit(&pol)
	}
	h, err := proxy.New(proxy.Options{Upstream: u, Store: st, Default: pol})
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
