package proxy

import (
	"errors"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// The hash an operator computes must be the storage key the request path
// used, or `keys get` finds nothing.
func TestKeyHashIsTheStorageKeyOfTheRequest(t *testing.T) {
	h := newKeyHashHandler(t, []Route{{Pattern: "/open/", Policy: withScope(nil)}})
	req := httptest.NewRequest("POST", "http://api.example/v1/charges", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer client-a")
	want := storageKeyFrom(req, readAs{}, "k-1", DefaultPolicy().ScopeHeaders, KeyFromHeader, "")

	got, err := h.KeyHashFrom(req, "k-1", "")
	if err != nil || got != want {
		t.Fatalf("KeyHashFrom = %q, %v; want %q", got, err, want)
	}
	other := req.Clone(req.Context())
	other.Header.Set("Authorization", "Bearer client-b")
	if h2, _ := h.KeyHashFrom(other, "k-1", ""); h2 == got {
		t.Error("two clients' keys hash the same: scope headers ignored")
	}
	// A route without scope headers shares one namespace.
	open := httptest.NewRequest("POST", "http://api.example/open/x", nil)
	open.Header.Set("Authorization", "Bearer client-a")
	if got, _ := h.KeyHashFrom(open, "k-1", ""); got != storageKeyFrom(open, readAs{}, "k-1", nil, KeyFromHeader, "") {
		t.Error("the matched route's scope headers were not used")
	}
}

func TestKeyHashRefusesWhatTheProxyWouldRefuse(t *testing.T) {
	h := newKeyHashHandler(t, []Route{{Pattern: "/internal/", Disabled: true, Policy: DefaultPolicy()}})
	for name, tc := range map[string]struct {
		method, target, key string
		want                error
	}{
		"unprotected method": {"GET", "/v1/x", "k", errNotProtected},
		"disabled route":     {"POST", "/internal/x", "k", errNotProtected},
		"no key":             {"POST", "/v1/x", "", errNoKey},
		"key too long":       {"POST", "/v1/x", strings.Repeat("k", 256), errKeyTooLong},
		"ambiguous path":     {"POST", "/v1%2Fx", "k", errRefused},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := h.KeyHashFrom(httptest.NewRequest(tc.method, tc.target, nil), tc.key, "")
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func withScope(scope []ScopeHeader) Policy {
	p := DefaultPolicy()
	p.ScopeHeaders = scope
	return p
}

func newKeyHashHandler(t *testing.T, routes []Route) *Handler {
	t.Helper()
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	h, err := New(Options{Upstream: &url.URL{Scheme: "http", Host: "127.0.0.1:1"}, Store: st, Routes: routes})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// An operator's hash of a payload-derived key is the request path's for
// every spelling of the path and method.
func TestKeyHashReadsThePathAsTheRequestPathDoes(t *testing.T) {
	p := DefaultPolicy()
	p.Header, p.KeySources = "", mustSources(t, "json:/id")
	h := newKeyHashHandler(t, []Route{{Pattern: "/orders", Policy: p}})
	hash := func(method, target string) string {
		t.Helper()
		got, err := h.KeyHashFrom(httptest.NewRequest(method, "http://api.example"+target, strings.NewReader(`{"id":"o1"}`)), "", "")
		if err != nil {
			t.Fatalf("%s %s: %v", method, target, err)
		}
		return got
	}
	want := hash("POST", "/orders")
	for _, c := range [][2]string{{"post", "/orders"}, {"POST", "/%6Frders"}, {"POST", "/x/../orders"}} {
		if got := hash(c[0], c[1]); got != want {
			t.Errorf("%s %s: %s, want %s", c[0], c[1], got, want)
		}
	}
}

// A body the request path refuses for a repeated name has no key hash:
// the operator learns why, as the client would.
func TestKeyHashRefusesABodyReadTwoWays(t *testing.T) {
	p := DefaultPolicy()
	p.Header, p.KeySources = "", mustSources(t, "json:/id")
	h := newKeyHashHandler(t, []Route{{Pattern: "/orders", Policy: p}})
	_, err := h.KeyHashFrom(httptest.NewRequest("POST", "http://api.example/orders", strings.NewReader(`{"id":"o1","ID":"o2"}`)), "", "")
	if !errors.Is(err, errRefused) || !strings.Contains(err.Error(), "ambiguous-body") {
		t.Fatalf("err = %v, want errRefused naming ambiguous-body", err)
	}
}
