package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// TestScriptsFollowValueLayout writes leases by hand from the Go constants
// that define the value layout and checks that the scripts read them the
// same way: the kind byte first, the token after leaseHeader bytes, then
// the lease's description, which a lease written before leases were
// described does not have.
func TestScriptsFollowValueLayout(t *testing.T) {
	m := miniredis.RunT(t)
	s := newStore(t, Options{URL: "redis://" + m.Addr()})
	ctx := context.Background()
	token := "0123456789abcdef0123456789abcdef"
	if len(token) != tokenLen {
		t.Fatalf("test token is %d bytes, tokens are %d", len(token), tokenLen)
	}
	lease := func(kind byte, tok string) string {
		v := make([]byte, leaseHeader, leaseHeader+len(tok))
		v[0] = kind
		return string(append(v, tok...))
	}
	tests := []struct {
		name  string
		value string
		owned bool
	}{
		{"lease with the token, undescribed (as earlier versions wrote it)", lease(kindLease, token), true},
		{"lease with the token and a description", lease(kindLease, token) + string(store.AppendLease(nil, &store.Lease{Instance: "p/1"})), true},
		{"record kind", lease(kindRecord, token), false},
		{"token one byte late", lease(kindLease, "x"+token), false},
		{"token one byte early", lease(kindLease, token)[1:], false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for op, fn := range map[string]func() error{
				"extend":   func() error { return s.Extend(ctx, "k", token, time.Minute) },
				"complete": func() error { return s.Complete(ctx, "k", token, &store.Record{Status: 200}, time.Minute) },
			} {
				if err := m.Set("idem:{k}", tt.value); err != nil {
					t.Fatal(err)
				}
				err := fn()
				if tt.owned && err != nil {
					t.Errorf("%s of a lease holding the token = %v, want nil", op, err)
				}
				if !tt.owned && !errors.Is(err, store.ErrLockLost) {
					t.Errorf("%s = %v, want ErrLockLost", op, err)
				}
			}
		})
	}
}

// TestCloseIsBounded: closing the store of a Redis that stopped answering
// returns within the store timeout, not after the client's own waits.
func TestCloseIsBounded(t *testing.T) {
	const timeout = 200 * time.Millisecond
	srv := redistest.Start(t)
	s, err := New(Options{URL: srv.URL(), Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Begin(ctx, "k", store.Lease{}, time.Minute); err != nil {
		t.Fatalf("Begin: %v", err)
	}
	srv.Pause()
	defer srv.Resume()
	// A command left in the pipeline while Redis does not answer.
	_, _ = s.Begin(ctx, "k2", store.Lease{}, time.Minute)
	start := time.Now()
	_ = s.Close()
	if elapsed := time.Since(start); elapsed > 2*timeout {
		t.Fatalf("Close took %v, want at most about the store timeout %v", elapsed, timeout)
	}
}

// TestLeaseOfAnEarlierVersionReads: during a rolling upgrade, a lease an
// earlier version wrote (nothing after its token) is in flight to Begin,
// Inspect and List, describing nothing but its fingerprint, and its owner
// still renews and completes it.
func TestLeaseOfAnEarlierVersionReads(t *testing.T) {
	m := miniredis.RunT(t)
	s := newStore(t, Options{URL: "redis://" + m.Addr()})
	ctx := context.Background()
	fp := store.Fingerprint{9, 31: 1}
	token := "0123456789abcdef0123456789abcdef"
	if err := m.Set("idem:{old}", string(append(append([]byte{kindLease}, fp[:]...), token...))); err != nil {
		t.Fatal(err)
	}
	bare := store.Lease{Fingerprint: fp}
	b, err := s.Begin(ctx, "old", store.Lease{Fingerprint: fp, Instance: "new/1"}, time.Minute)
	if err != nil || b.State != store.InFlight || b.Lease != bare {
		t.Fatalf("Begin = %+v, %v; want in flight with the fingerprint only", b, err)
	}
	if e, err := s.Inspect(ctx, "old"); err != nil || e.State != store.InFlight || e.Lease != bare {
		t.Fatalf("Inspect = %+v, %v; want in flight with the fingerprint only", e, err)
	}
	if entries, _, err := s.List(ctx, store.InFlight, "", 10); err != nil || len(entries) != 1 || entries[0].Lease != bare {
		t.Fatalf("List = %+v, %v; want the lease with the fingerprint only", entries, err)
	}
	if err := s.Extend(ctx, "old", token, time.Minute); err != nil {
		t.Fatalf("Extend by its owner: %v", err)
	}
	if err := s.Complete(ctx, "old", token, &store.Record{Status: 201, Fingerprint: fp}, time.Hour); err != nil {
		t.Fatalf("Complete by its owner: %v", err)
	}
}
