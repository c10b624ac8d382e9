package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
)

// A respond-async request whose upstream answered a release status ("503,
// not processed") is not lost behind its status URL: a poll through
// another replica on the shared store answers that 503, marked
// Idempotent-Released, the request sent again with its key executes, and
// the status URL then follows that execution to its recorded answer.
func TestPollOfAReleasedRequestAnswersItsReleaseStatusThroughAnyReplica(t *testing.T) {
	up := startUpstream(t)
	cfg := asyncConfig(up)
	cfg.RedisURL = redistest.Start(t).URL()
	ps := startReplicas(t, 2, cfg)
	c := newClient(t, 20*time.Second)
	const key = "released-report"
	notNow := map[string]string{"Prefer": "respond-async", hdrStatus: "503", "Authorization": "Bearer alice"}
	first := mustSend(t, c, ps[0].URL(), request{Key: key, Body: `{"month":"2026-12"}`, Header: notNow})
	if first.Status != http.StatusAccepted {
		t.Fatalf("first: %s, want 202", first)
	}
	loc := first.Header.Get("Location")

	p := pollUntilAnswered(t, c, []string{ps[1].URL()}, loc)
	if p.Status != http.StatusServiceUnavailable || p.Header.Get("Idempotent-Released") != "true" || p.Replayed() {
		t.Fatalf("poll through the other replica: %s, want the upstream's 503 marked Idempotent-Released, not replayed", p)
	}

	ready := map[string]string{"Prefer": "respond-async", "Authorization": "Bearer alice"}
	resend := mustSend(t, c, ps[1].URL(), request{Key: key, Body: `{"month":"2026-12"}`, Header: ready})
	if resend.Status != http.StatusAccepted || resend.Header.Get("Location") != loc {
		t.Fatalf("resend with the key: %s Location %q, want 202 at %q", resend, resend.Header.Get("Location"), loc)
	}
	done := pollUntilAnswered(t, c, bases(ps), loc)
	ex := up.Execs(key)
	if len(ex) != 2 {
		t.Fatalf("upstream received the key %d times, want 2: the 503 not processed, then the resend", len(ex))
	}
	if done.Status != http.StatusCreated || !done.Replayed() || done.Body != ex[1].Body {
		t.Fatalf("status URL after the resend: %s %q, want the resend's 201 %q replayed", done, done.Body, ex[1].Body)
	}
	for _, p := range ps {
		if r := mustSend(t, c, p.URL(), request{Method: http.MethodGet, Path: loc, Header: alice}); r.Status != http.StatusCreated || r.Body != ex[1].Body {
			t.Errorf("status URL through %s: %s, want the recorded 201", p.name, r)
		}
	}
}
