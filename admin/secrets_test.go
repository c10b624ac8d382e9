package admin

import (
	"net/http"
	"strings"
	"testing"
)

// A recorded response keeps the upstream's Set-Cookie (recorded, not
// replayed): a session the upstream issued to one end user. The key API
// shows records to operators, and an end user's session is a secret the
// proxy never logs nor shows: the header's name may show, its value not.
func TestKeyAPINeverShowsARecordedSessionCookie(t *testing.T) {
	const secret = "s3ss10n-0f-an-end-user"
	e := newEnv(t, testToken)
	entry := completedEntry("aa01")
	entry.Record.Header["Set-Cookie"] = []string{"session=" + secret + "; HttpOnly"}
	e.st.entries["aa01"] = entry
	for _, target := range []string{"/admin/keys/aa01", "/admin/keys?state=all"} {
		rec := e.do(t, "GET", target, bearer, "")
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s = %d %s", target, rec.Code, rec.Body.String())
		}
		if strings.Contains(rec.Body.String(), secret) {
			t.Errorf("GET %s shows the end user's session cookie: %s", target, rec.Body.String())
		}
	}
}
