package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// nopCloser is a Store under test as a store.Store, for store.Tombstones.
type nopCloser struct{ Store }

func (nopCloser) Close() error { return nil }

// keeperCloser is nopCloser for a store that keeps tombstones itself, so
// that store.Tombstones finds it does.
type keeperCloser struct {
	nopCloser
	k interface{ CheckTombstones(bool) }
}

func (k keeperCloser) CheckTombstones(on bool) { k.k.CheckTombstones(on) }

// withTombstones is the Store under test keeping tombstones, in its own
// operations if it keeps them itself (store.TombstoneKeeper), looking for
// them until the test ends.
func withTombstones(t *testing.T, s Store) *store.Tombstones {
	var ts *store.Tombstones
	if k, ok := s.(interface{ CheckTombstones(bool) }); ok {
		ts = store.WithTombstones(keeperCloser{nopCloser{s}, k}, nil)
	} else {
		ts = store.WithTombstones(nopCloser{s}, nil)
	}
	ts.Check(true)
	t.Cleanup(func() { ts.Check(false) })
	return ts
}

// testExpiredKeyIsRemembered: with tombstones kept over the store, a key
// whose record expired is reported Expired, with its fingerprint and
// without a lease, until the window after its record passes; then it is
// new. A record completed without Tombstone leaves none, and a key an
// operator deleted loses its tombstone.
func testExpiredKeyIsRemembered(t *testing.T, h *harness) {
	ts := withTombstones(t, h.Store)
	ctx := context.Background()
	ttl := h.lease()
	window := 2 * ttl
	begin := func(key string) store.BeginResult {
		t.Helper()
		b, err := ts.Begin(ctx, key, store.Lease{Fingerprint: fingerprint(2)}, time.Minute)
		if err != nil {
			t.Fatalf("Begin(%q): %v", key, err)
		}
		return b
	}
	key, forgotten, deleted := h.key("k"), h.key("forgotten"), h.key("deleted")
	started := time.Now()
	for _, k := range []string{key, forgotten, deleted} {
		b := begin(k)
		if b.State != store.Acquired {
			t.Fatalf("Begin(%q) = %v, want acquired", k, b.State)
		}
		rec := *records()["binary body"]
		if k != forgotten {
			rec.Tombstone = window
		}
		if err := ts.Complete(ctx, k, b.Token, &rec, ttl); err != nil {
			t.Fatalf("Complete(%q): %v", k, err)
		}
	}
	if b := begin(key); b.State != store.Completed {
		t.Fatalf("Begin before ttl = %v, want completed", b.State)
	}
	h.pass(ttl + ttl/2)
	for range 2 { // the first refusal leaves no lease behind
		b := begin(key)
		if b.State != store.Expired || b.Token != "" || b.Fingerprint != fingerprint(9) {
			t.Fatalf("Begin after ttl = %v token %q fp %x, want expired, no token, the record's fingerprint", b.State, b.Token, b.Fingerprint[:4])
		}
		if b.ExpiredAt.IsZero() || b.ExpiredAt.Before(started) || b.ExpiredAt.After(time.Now().Add(ttl)) {
			t.Errorf("ExpiredAt %v, want when the record expired (about %v)", b.ExpiredAt, started.Add(ttl))
		}
	}
	entries, _, err := ts.List(ctx, store.Completed, "", 1000)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for _, e := range entries {
		if e.Key == key+store.TombstoneSuffix {
			t.Errorf("List shows the tombstone %q", e.Key)
		}
	}
	if b := begin(forgotten); b.State != store.Acquired {
		t.Errorf("Begin of a record completed without Tombstone = %v, want acquired", b.State)
	}
	if err := ts.Delete(ctx, deleted); err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Delete of an expired key: %v", err)
	}
	if b := begin(deleted); b.State != store.Acquired {
		t.Errorf("Begin of an expired key an operator deleted = %v, want acquired: its tombstone goes with it", b.State)
	}
	h.pass(window)
	deadline := time.Now().Add(5 * time.Second)
	for {
		b := begin(key)
		if b.State == store.Acquired {
			break
		}
		if h.Advance != nil || time.Now().After(deadline) {
			t.Fatalf("Begin after the window = %v, want acquired: the key is new", b.State)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testTombstonesOffCostNothing: with tombstones off, Begin of a key whose
// tombstone is there takes the lease, as a store without them does.
func testTombstonesOff(t *testing.T, h *harness) {
	ts := withTombstones(t, h.Store)
	ctx := context.Background()
	ttl := h.lease()
	key := h.key("k")
	b, err := ts.Begin(ctx, key, store.Lease{Fingerprint: fingerprint(1)}, time.Minute)
	if err != nil || b.State != store.Acquired {
		t.Fatalf("Begin = %v, %v", b.State, err)
	}
	rec := *records()["binary body"]
	rec.Tombstone = time.Hour
	if err := ts.Complete(ctx, key, b.Token, &rec, ttl); err != nil {
		t.Fatal(err)
	}
	h.pass(ttl + ttl/2)
	ts.Check(false)
	if b, err := ts.Begin(ctx, key, store.Lease{Fingerprint: fingerprint(1)}, time.Minute); err != nil || b.State != store.Acquired {
		t.Fatalf("Begin with tombstones off = %v, %v, want acquired", b.State, err)
	}
}
