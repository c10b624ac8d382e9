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

// A Cookie:NAME scope that upstreams read two ways is refused: net/http
// reads "session=alice, session=bob" as the session "alice, session=bob",
// Python's http.cookies as bob, so the scope the proxy hashes may not be
// the session the upstream acts for.
func TestCookieScopeReadTwoWaysIsRefused(t *testing.T) {
	e := newEnv(t, nil, withPolicy(func(p *Policy) { p.ScopeHeaders = []ScopeHeader{{Cookie: "session"}} }))
	for _, cookie := range []string{"session=alice, session=bob", "session=alice session=bob", "session=a,b", "session= bob"} {
		if r := e.do(t, "POST", "/x", "k-1", "{}", "Cookie", cookie); r.StatusCode != http.StatusBadRequest || r.problemType() != "invalid-key" {
			t.Errorf("Cookie: %s: %d %q, want 400 invalid-key", cookie, r.StatusCode, r.problemType())
		}
	}
	if n := e.up.calls.Load(); n != 0 {
		t.Errorf("the upstream was called %d times", n)
	}
	if r := e.do(t, "POST", "/x", "k-1", "{}", "Cookie", "theme=a b; session=bob"); r.StatusCode != http.StatusCreated {
		t.Errorf("another cookie holding a space: %d %q, want executed", r.StatusCode, r.problemType())
	}
}
