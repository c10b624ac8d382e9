package proxy

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// The 410 key-expired of a retry says when the key's record expired —
// its completion plus ttl, whenever in the window the retry comes — and
// the window runs expired_key_window from that expiry: refused just
// inside its end, executed again just outside it.
func TestExpiredKeyRefusalSaysWhenItsRecordExpired(t *testing.T) {
	e, clock, _ := tombstoneEnv(t, true) // ttl 1h, window 24h
	completed := clock.Now()
	if r := e.do(t, "POST", "/x", "k-1", `{}`); r.StatusCode != http.StatusCreated {
		t.Fatalf("first: %d %s", r.StatusCode, r.body)
	}
	want := "expired at " + completed.Add(time.Hour).UTC().Format(time.RFC3339) + ","
	for _, step := range []struct {
		advance time.Duration
		when    string
	}{
		{time.Hour + time.Second, "a second after the record expired"},
		{24*time.Hour - 2*time.Second, "a second before the window's end"},
	} {
		clock.advance(step.advance)
		r := e.do(t, "POST", "/x", "k-1", `{}`)
		if r.StatusCode != http.StatusGone || r.problemType() != "key-expired" {
			t.Fatalf("retry %s: %d %s, want 410 key-expired", step.when, r.StatusCode, r.body)
		}
		if !strings.Contains(r.body, want) {
			t.Errorf("retry %s: detail %s, want it to say %q", step.when, r.body, want)
		}
	}
	clock.advance(2 * time.Second)
	if r := e.do(t, "POST", "/x", "k-1", `{}`); r.StatusCode != http.StatusCreated || r.replayed() {
		t.Fatalf("retry a second after the window's end: %d %s, want the key executed again", r.StatusCode, r.body)
	}
	if got := e.up.calls.Load(); got != 2 {
		t.Fatalf("upstream executions = %d, want 2", got)
	}
}
