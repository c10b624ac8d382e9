package client

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// A redirect is the operation's answer, handed to the caller and never
// followed with the key: the redirected request would carry the key and
// body to another URL — behind the proxy a different request under the same
// key (422 payload-mismatch, though the operation ran), on another origin an
// execution the proxy never sees, run again by every retry of a lost answer.
func TestRedirectIsTheAnswerNotFollowedWithTheKey(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(other.Close)
	for name, target := range map[string]string{
		"same origin":    "/v1/charges/moved",
		"another origin": other.URL + "/v1/charges",
	} {
		t.Run(name, func(t *testing.T) {
			u := &upstream{}
			u.steps = []http.HandlerFunc{func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/charges" {
					u.execute(w, r)
					return
				}
				http.Redirect(w, r, target, http.StatusTemporaryRedirect)
			}}
			base := startProxy(t, startUpstream(t, u), nil)
			resp, err := (&Client{}).Do(t.Context(), newCharge(t, base, `{"amount":3}`))
			if err != nil {
				t.Fatalf("Do: %v, want the 307 handed over", err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != target {
				t.Errorf("status %d Location %q, want 307 %q", resp.StatusCode, resp.Header.Get("Location"), target)
			}
			if n := u.calls.Load(); n != 1 {
				t.Errorf("%d requests reached the upstream, want the one redirected", n)
			}
		})
	}
	other.Close() // waits for any request it got
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("%d request(s) carried the key to the other origin", n)
	}
}
