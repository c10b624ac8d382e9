package admin

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The admin listener's root lists every endpoint with what it needs, and
// every endpoint it lists is served: the index cannot name a path the
// listener does not have.
func TestAdminRootIndexesEveryEndpoint(t *testing.T) {
	e := newEnv(t, testToken, func(o *Options) { o.PProf = true; o.Config = func() []byte { return []byte("listen: :8080\n") } })
	rec := e.do(t, "GET", "/", "", "")
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
		t.Fatalf("GET / = %d %s, want 200 text/plain", rec.Code, rec.Header().Get("Content-Type"))
	}
	index := rec.Body.String()
	for _, ep := range endpoints {
		if !strings.Contains(index, ep.request+"\n") {
			t.Errorf("the index lacks %s:\n%s", ep.request, index)
		}
		method, target, _ := strings.Cut(ep.request, " ")
		target, _, _ = strings.Cut(strings.ReplaceAll(target, "{key_hash}", "9f2c4e0b7a1d3c5e8f60718293a4b5c6"), "?")
		body := ""
		if method == "POST" {
			body = `{"key":"k"}`
		}
		if rec := e.do(t, method, target, bearer, body); rec.Body.String() == "404 page not found\n" {
			t.Errorf("the index lists %s, which the listener does not serve", ep.request)
		}
	}
	for _, want := range []string{
		"GET /readyz\n    200 while the store answers, 503 with the reason otherwise (readiness) [open]\n",
		"GET /admin/config\n    the effective configuration as YAML, each value's origin, secrets masked [needs the admin token]\n",
	} {
		if !strings.Contains(index, want) {
			t.Errorf("the index lacks %q:\n%s", want, index)
		}
	}
}

// Without a token the index says the key API is off and how to turn it
// on; a browser gets the same as HTML.
func TestAdminRootSaysWhatIsOff(t *testing.T) {
	e := newEnv(t, "")
	index := e.do(t, "GET", "/", "", "").Body.String()
	for _, want := range []string{
		"GET /admin/keys/{key_hash}\n    the lease (who holds it, since when) or the record under a key_hash [off: set admin.token or admin.token_file]\n",
		"GET /debug/pprof/\n    Go runtime profiles [off: set admin.pprof]\n",
	} {
		if !strings.Contains(index, want) {
			t.Errorf("the index lacks %q:\n%s", want, index)
		}
	}
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("Accept", "text/html,application/xhtml+xml")
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	page := rec.Body.String()
	if !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") || !strings.Contains(page, `GET <a href="/readyz">/readyz</a>`) ||
		!strings.Contains(page, "<code>GET /admin/keys?state=in_flight|completed|all&amp;limit=N&amp;cursor=C</code>") {
		t.Errorf("GET / from a browser = %s:\n%s\nwant an HTML table linking the plain GETs", rec.Header().Get("Content-Type"), page)
	}
	if rec := e.do(t, "GET", "/nothing-here", "", ""); rec.Code != http.StatusNotFound {
		t.Errorf("GET /nothing-here = %d, want 404: only the root is the index", rec.Code)
	}
}
