package proxy

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// unreadableStore finds a value it cannot decode under every key, as an
// older proxy does with a newer one's records during a rolling upgrade.
type unreadableStore struct{ *flakyStore }

func (unreadableStore) Begin(context.Context, string, store.Fingerprint, time.Duration) (store.BeginResult, error) {
	return store.BeginResult{}, fmt.Errorf("redis begin: unknown record version: %w", store.ErrCorrupt)
}

// A key whose stored value cannot be read may be completed already: even a
// route that fails open refuses it rather than executing it again.
func TestUnreadableRecordIsNeverExecutedAgainUnderFailOpen(t *testing.T) {
	e := newEnv(t, nil, withStore(unreadableStore{newFlaky(t)}),
		withPolicy(func(p *Policy) { p.FailOpen = FailOpen }))
	r := e.do(t, "POST", "/x", "k", "{}")
	if r.StatusCode != http.StatusServiceUnavailable || r.problemType() != "store-unavailable" {
		t.Fatalf("got %d %s, want 503 store-unavailable", r.StatusCode, r.body)
	}
	if got := e.up.calls.Load(); got != 0 {
		t.Fatalf("upstream executions = %d, want 0", got)
	}
}
