package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
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
			// The 404's record expires a second after it was written.
			waitForAnswer(t, c, p, "missing-1", "not-found", 10*time.Second, func(r reply) bool { return !r.Replayed() })
			if r := answer(t, c, p, "created-1", "ok"); r.Status != http.StatusCreated || !r.Replayed() {
				t.Errorf("created-1 after the 404 expired: %s, want its 201 replayed (ttl 1h)", r)
			}
			if got := up.Execs(); got != 3 {
				t.Errorf("upstream executed %d times, want 3 (created-1 once, missing-1 twice)", got)
			}
		})
	}
}

// TestExpiredKeyIsRefusedThenNew runs the built binary with ttl 1s and
// expired_keys: reject for a window of 3s, on the memory store and on
// Redis: a retry after the record expired gets 410 key-expired and the
// upstream is not called again; after the window the key executes again.
func TestExpiredKeyIsRefusedThenNew(t *testing.T) {
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			up := startScriptedUpstream(t)
			p := startProxy(t, "expired-keys-"+kind, scriptedConfig(t, kind, up, map[string]string{
				"ttl": "1s", "lock_ttl": "1s", "expired_keys": "reject", "expired_key_window": "3s",
			}))
			c := newClient(t, 15*time.Second)
			if r := answer(t, c, p, "order-1", "ok"); r.Status != http.StatusCreated || r.Replayed() {
				t.Fatalf("first: %s, want an executed 201", r)
			}
			refused := waitForAnswer(t, c, p, "order-1", "ok", 10*time.Second, func(r reply) bool { return !r.Replayed() })
			if refused.Status != http.StatusGone || refused.Problem() != "key-expired" {
				t.Fatalf("retry after ttl: %s %s, want 410 key-expired", refused, refused.Body)
			}
			if got := up.Execs(); got != 1 {
				t.Fatalf("upstream executed %d times after the refusal, want 1", got)
			}
			again := waitForAnswer(t, c, p, "order-1", "ok", 15*time.Second, func(r reply) bool { return r.Status != http.StatusGone })
			if again.Status != http.StatusCreated || again.Replayed() {
				t.Fatalf("retry after the window: %s, want the key executed again", again)
			}
			if got := up.Execs(); got != 2 {
				t.Errorf("upstream executed %d times, want 2", got)
			}
		})
	}
}

// waitForAnswer sends key, asking the upstream for want, until done
// accepts the answer within bound, and returns that answer.
func waitForAnswer(t *testing.T, c *http.Client, p *proxyProc, key, want string, bound time.Duration, done func(reply) bool) reply {
	t.Helper()
	var last reply
	wait.SucceedsSoon(t, bound, func() error {
		last = answer(t, c, p, key, want)
		if !done(last) {
			return fmt.Errorf("%s: still %s", key, last)
		}
		return nil
	})
	return last
}
