package e2e

import (
	"net/http"
	"testing"
	"time"
)

// TestStatusTTLKeepsEachAnswerForItsStatus runs the built binary with ttl
// 1h and status_ttl {"404": 1s}, on the memory store and on Redis: the
// 404 is forgotten after a second and its key executes again, while the
// 201 recorded before it is still replayed.
func TestStatusTTLKeepsEachAnswerForItsStatus(t *testing.T) {
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			up := startScriptedUpstream(t)
			p := startProxy(t, "status-ttl-"+kind, scriptedConfig(t, kind, up, map[string]string{
				"ttl": "1h", "status_ttl": `{"404": 1s}`,
			}))
			c := newClient(t, 15*time.Second)
			if r := answer(t, c, p, "created-1", "ok"); r.Status != http.StatusCreated || r.Replayed() {
				t.Fatalf("created-1: %s, want an executed 201", r)
			}
			if r := answer(t, c, p, "missing-1", "not-found"); r.Status != http.StatusNotFound || r.Replayed() {
				t.Fatalf("missing-1: %s, want an executed 404", r)
			}
			if r := answer(t, c, p, "missing-1", "not-found"); !r.Replayed() {
				t.Fatalf("missing-1 at once: %s, want the 404 replayed within its second", r)
			}
			// The 404's record expires a second after it was written: poll,
			// bounded, until its key executes again.
			deadline := time.Now().Add(10 * time.Second)
			for {
				r := answer(t, c, p, "missing-1", "not-found")
				if !r.Replayed() {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("missing-1 still replayed 10s after a status_ttl of 1s: %s", r)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if r := answer(t, c, p, "created-1", "ok"); r.Status != http.StatusCreated || !r.Replayed() {
				t.Errorf("created-1 after the 404 expired: %s, want its 201 replayed (ttl 1h)", r)
			}
			if got := up.Execs(); got != 3 {
				t.Errorf("upstream executed %d times, want 3 (created-1 once, missing-1 twice)", got)
			}
		})
	}
}
