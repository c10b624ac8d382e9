package proxy

import (
	"net/http"
	"testing"
)

// A Cookie:NAME scope must see the cookie wherever the upstream does. Go's
// net/http (like most cookie parsers) trims the whitespace around a
// cookie's name, so "session =bob" is bob's session upstream. If the scope
// skips it, every such request shares the namespace of requests without
// the cookie, and one session is replayed another's response.
func TestCookieScopeSeesTheCookieTheUpstreamReads(t *testing.T) {
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie("session")
		if err != nil {
			w.Write([]byte("anonymous"))
			return
		}
		w.Write([]byte("account of " + c.Value))
	}, withPolicy(func(p *Policy) { p.ScopeHeaders = []ScopeHeader{{Cookie: "session"}} }))
	alice := e.do(t, "POST", "/x", "shared", "{}", "Cookie", "session =alice")
	if alice.body != "account of alice" {
		t.Fatalf("alice got %q", alice.body)
	}
	bob := e.do(t, "POST", "/x", "shared", "{}", "Cookie", "session =bob")
	if bob.replayed() || bob.body != "account of bob" {
		t.Fatalf("bob got %q (replayed=%v): another session's response", bob.body, bob.replayed())
	}
}
