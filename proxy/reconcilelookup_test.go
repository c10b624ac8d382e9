package proxy

import (
	"net/http"
	"testing"
	"time"
)

// A found lookup's answer is recorded as a response is: its headers, and
// its body whole up to max_response_body, past it without its body
// (Idempotent-Body-Omitted), for the first caller and every retry.
func TestFoundAnswerIsRecordedWholeUpToMaxResponseBody(t *testing.T) {
	const answer = `{"status":"succeeded"}` // chargeLedger's lookup
	for _, tc := range []struct {
		name    string
		max     int64
		omitted bool
	}{
		{"as long as max_response_body", int64(len(answer)), false},
		{"a byte past max_response_body", int64(len(answer)) - 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &chargeLedger{charges: map[string]bool{}}
			e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					w.Header().Set("X-Charge-State", "settled")
					l.lookup(w, r)
					return
				}
				l.commit(r.Header.Get("Idempotency-Key"))
				hangUp(w)
			}, func(o *Options) {
				reviewPolicy(&o.Default)
				o.Default.MaxResponseBody = tc.max
				o.Default.Reconcile.After, o.Default.Reconcile.Every = time.Millisecond, 50*time.Millisecond
			})
			first := e.do(t, "POST", "/x", "k1", `{}`)
			retry := e.do(t, "POST", "/x", "k1", `{}`)
			for _, r := range []*response{first, retry} {
				omitted := r.Header.Get("Idempotent-Body-Omitted") == "true"
				if r.Header.Get("X-Charge-State") != "settled" {
					t.Errorf("headers %v, want the lookup's X-Charge-State", r.Header)
				}
				if r.StatusCode != http.StatusOK || omitted != tc.omitted || omitted != (r.body == "") || !omitted && r.body != answer {
					t.Fatalf("%d %q (body omitted: %v), want 200 with the lookup's body omitted: %v", r.StatusCode, r.body, omitted, tc.omitted)
				}
			}
		})
	}
}
