package admin

import (
	"net/http"
	"testing"
)

// GET /admin/config serves the view it is given, behind the token, and is
// counted like every admin operation.
func TestConfigIsServedBehindTheToken(t *testing.T) {
	view := "listen: :8080 # default\n"
	e := newEnv(t, testToken, func(o *Options) { o.Config = func() []byte { return []byte(view) } })
	if rec := e.do(t, "GET", "/admin/config", "", ""); rec.Code != http.StatusUnauthorized {
		t.Errorf("without the token: %d, want 401", rec.Code)
	}
	rec := e.do(t, "GET", "/admin/config", bearer, "")
	if rec.Code != http.StatusOK || rec.Body.String() != view || rec.Header().Get("Content-Type") != "application/yaml; charset=utf-8" {
		t.Errorf("GET /admin/config = %d %q (%s), want 200 and the view as YAML", rec.Code, rec.Body.String(), rec.Header().Get("Content-Type"))
	}
	if got := e.ops(opConfig, resultOK); got != 1 {
		t.Errorf("config ok counted %v, want 1", got)
	}
	if got := e.ops(opConfig, resultUnauthorized); got != 1 {
		t.Errorf("config unauthorized counted %v, want 1", got)
	}
	off := newEnv(t, "", func(o *Options) { o.Config = func() []byte { return []byte(view) } })
	if rec := off.do(t, "GET", "/admin/config", bearer, ""); rec.Code != http.StatusNotFound {
		t.Errorf("without a token configured: %d, want 404", rec.Code)
	}
}
