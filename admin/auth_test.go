package admin

import (
	"net/http"
	"strings"
	"testing"
)

var apiCalls = []struct{ method, target, body string }{
	{"GET", "/admin/keys/0123abcd", ""},
	{"DELETE", "/admin/keys/0123abcd", ""},
	{"GET", "/admin/keys", ""},
	{"POST", "/admin/hash", `{"key":"k"}`},
	{"GET", "/admin/anything", ""},
}

// Without a token the API does not exist: nothing tells a prober it is there.
func TestAdminAPIIsOffWithoutAToken(t *testing.T) {
	e := newEnv(t, "")
	for _, c := range apiCalls {
		if rec := e.do(t, c.method, c.target, bearer, c.body); rec.Code != http.StatusNotFound {
			t.Errorf("%s %s = %d, want 404 while no token is configured", c.method, c.target, rec.Code)
		}
	}
}

func TestAdminAPIRequiresTheBearerToken(t *testing.T) {
	e := newEnv(t, testToken)
	for _, auth := range []string{"", "Bearer wrong", "Bearer " + testToken + "x", "Basic " + testToken, testToken} {
		for _, c := range apiCalls {
			rec := e.do(t, c.method, c.target, auth, c.body)
			if rec.Code != http.StatusUnauthorized {
				t.Errorf("%s %s with Authorization %q = %d, want 401", c.method, c.target, auth, rec.Code)
				continue
			}
			if got := rec.Header().Get("WWW-Authenticate"); len(got) < 6 || got[:6] != "Bearer" {
				t.Errorf("WWW-Authenticate = %q, want the Bearer scheme", got)
			}
			if p := problemOf(t, rec); p.Type != probUnauthorized.Type {
				t.Errorf("problem type %q, want %q", p.Type, probUnauthorized.Type)
			}
		}
	}
	if got := e.ops(opDelete, resultUnauthorized); got != 5 {
		t.Errorf("unauthorized deletes counted %v, want 5", got)
	}
	if rec := e.do(t, "GET", "/admin/keys", "bearer "+testToken, ""); rec.Code != http.StatusOK {
		t.Errorf("the right token (scheme in lower case) got %d, want 200", rec.Code)
	}
}

// A reload that changes the token (admin.token_file rewritten) applies to
// the next request: the old token stops working.
func TestReplacedTokenAppliesToTheNextRequest(t *testing.T) {
	e := newEnv(t, testToken)
	e.token.Set("rotated")
	if rec := e.do(t, "GET", "/admin/keys", bearer, ""); rec.Code != http.StatusUnauthorized {
		t.Errorf("old token after rotation: %d, want 401", rec.Code)
	}
	if rec := e.do(t, "GET", "/admin/keys", "Bearer rotated", ""); rec.Code != http.StatusOK {
		t.Errorf("new token: %d, want 200", rec.Code)
	}
	e.token.Set("")
	if rec := e.do(t, "GET", "/admin/keys", "Bearer rotated", ""); rec.Code != http.StatusNotFound {
		t.Errorf("token removed: %d, want 404", rec.Code)
	}
}

// A token set with surrounding whitespace — a Secret written by echo ends
// in a newline — is the token without it, as a token file's is: the
// credential a client sends is compared trimmed, so it could never match.
func TestTokenIgnoresSurroundingWhitespaceAsATokenFileDoes(t *testing.T) {
	e := newEnv(t, testToken+"\n")
	if rec := e.do(t, "GET", "/admin/keys", bearer, ""); rec.Code != http.StatusOK {
		t.Errorf("token set with a newline, sent without: %d, want 200", rec.Code)
	}
	e.token.Set(" \t\n")
	if rec := e.do(t, "GET", "/admin/keys", bearer, ""); rec.Code != http.StatusNotFound {
		t.Errorf("a blank token: %d, want 404 (no token, the API off)", rec.Code)
	}
	if e.token.Enabled() {
		t.Error("a blank token enables the API, which no request could then reach")
	}
}

// With the token, a method a path of the API does not serve is a 405
// problem whose Allow names the methods it does, and a path the API does
// not have is a 404 problem; without a token both stay a bare 404.
func TestUnservedAdminRequestIsAProblemNamingTheMethodsAllowed(t *testing.T) {
	e := newEnv(t, testToken)
	for _, tc := range []struct {
		method, target string
		status         int
		typ, allow     string
	}{
		{"PUT", "/admin/keys/0123abcd", http.StatusMethodNotAllowed, probMethod.Type, "GET, HEAD, DELETE"},
		{"POST", "/admin/keys", http.StatusMethodNotAllowed, probMethod.Type, "GET, HEAD"},
		{"GET", "/admin/hash", http.StatusMethodNotAllowed, probMethod.Type, "POST"},
		{"DELETE", "/admin/report", http.StatusMethodNotAllowed, probMethod.Type, "GET, HEAD"},
		{"GET", "/admin/nope", http.StatusNotFound, probNoResource.Type, ""},
		{"PUT", "/admin/keys/a/b", http.StatusNotFound, probNoResource.Type, ""},
		{"GET", "/admin/", http.StatusNotFound, probNoResource.Type, ""},
		{"GET", "/admin", http.StatusNotFound, probNoResource.Type, ""},
	} {
		rec := e.do(t, tc.method, tc.target, bearer, "")
		if rec.Code != tc.status {
			t.Errorf("%s %s = %d %s, want %d", tc.method, tc.target, rec.Code, rec.Body, tc.status)
			continue
		}
		if p := problemOf(t, rec); p.Type != tc.typ {
			t.Errorf("%s %s: problem type %q, want %q", tc.method, tc.target, p.Type, tc.typ)
		}
		if got := rec.Header().Get("Allow"); got != tc.allow {
			t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.target, got, tc.allow)
		}
	}
	off := newEnv(t, "")
	for _, target := range []string{"/admin/keys/0123abcd", "/admin/nope", "/admin"} {
		rec := off.do(t, "PUT", target, bearer, "")
		if rec.Code != http.StatusNotFound || rec.Header().Get("Allow") != "" || strings.Contains(rec.Header().Get("Content-Type"), "problem") {
			t.Errorf("PUT %s without a token configured = %d %v, want a bare 404", target, rec.Code, rec.Header())
		}
	}
}
