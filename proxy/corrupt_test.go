package proxy

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// unreadableStore finds under every key a record it cannot read, for the
// reason err gives.
type unreadableStore struct {
	*flakyStore
	err error
}

func (s unreadableStore) Begin(context.Context, string, store.Lease, time.Duration) (store.BeginResult, error) {
	return store.BeginResult{}, s.err
}

// sealedStore finds under every key a sealed record that no keyring
// opened: what a store holds when encryption was turned off.
type sealedStore struct{ *flakyStore }

func (sealedStore) Begin(_ context.Context, _ string, l store.Lease, _ time.Duration) (store.BeginResult, error) {
	fp := l.Fingerprint
	rec := &store.Record{Status: 201, Fingerprint: fp, Sealed: &store.Sealed{KeyID: "2026-01", Data: []byte{1}}}
	return store.BeginResult{State: store.Completed, Fingerprint: fp, Record: rec}, nil
}

// A key whose record cannot be read was executed already: whatever the
// reason, and even on a route that fails open, it is refused with 503
// record-unreadable, logged with the key id and counted by reason, and the
// upstream is never called.
func TestUnreadableRecordIsNeverExecutedAgain(t *testing.T) {
	tests := []struct {
		name       string
		st         func(*flakyStore) Store
		reason     string
		logKeyID   string
		failClosed bool
	}{
		{"newer format", func(f *flakyStore) Store {
			return unreadableStore{f, fmt.Errorf("redis begin: unknown record version: %w", store.ErrCorrupt)}
		}, "format", "", false},
		{"newer format, fail closed", func(f *flakyStore) Store {
			return unreadableStore{f, fmt.Errorf("redis begin: unknown record version: %w", store.ErrCorrupt)}
		}, "format", "", true},
		{"key removed", func(f *flakyStore) Store {
			return unreadableStore{f, &store.SealError{KeyID: "2025-12", Err: store.ErrKeyUnknown}}
		}, "key_unknown", "2025-12", false},
		{"changed or moved", func(f *flakyStore) Store {
			return unreadableStore{f, &store.SealError{KeyID: "2026-01", Err: store.ErrAuthFailed}}
		}, "auth_failed", "2026-01", false},
		{"sealed, no keyring", func(f *flakyStore) Store { return sealedStore{f} }, "key_unknown", "2026-01", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var logs lockedBuffer
			e := newEnv(t, nil, withStore(tc.st(newFlaky(t))), withLog(&logs), withPolicy(func(p *Policy) {
				if !tc.failClosed {
					p.OnStoreError = FailOpen
				}
			}))
			for range 2 {
				r := e.do(t, "POST", "/x", "k", "{}")
				if r.StatusCode != http.StatusServiceUnavailable || r.problemType() != "record-unreadable" {
					t.Fatalf("got %d %s, want 503 record-unreadable", r.StatusCode, r.body)
				}
			}
			if got := e.up.calls.Load(); got != 0 {
				t.Fatalf("upstream executions = %d, want 0", got)
			}
			if got := testutil.ToFloat64(e.handler.metrics.unreadable[tc.reason]); got != 2 {
				t.Errorf("record_unreadable_total{reason=%q} = %v, want 2", tc.reason, got)
			}
			if got := e.outcomes(defaultRoute, OutcomeUnreadable); got != 2 {
				t.Errorf("requests_total{outcome=unreadable} = %v, want 2", got)
			}
			if got := testutil.ToFloat64(e.handler.metrics.storeErrors.WithLabelValues(opBegin.String())); got != 0 {
				t.Errorf("store_errors_total{operation=begin} = %v, want 0: the store answered", got)
			}
			lines := logs.lines(t, "recorded response unreadable")
			if len(lines) != 2 {
				t.Fatalf("%d log lines on the unreadable record, want 2", len(lines))
			}
			if l := lines[0]; l["level"] != "ERROR" || l["reason"] != tc.reason || l["key_id"] != tc.logKeyID {
				t.Errorf("log line %v, want level ERROR, reason %s, key_id %q", l, tc.reason, tc.logKeyID)
			}
		})
	}
}
