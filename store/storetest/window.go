package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// testExpiredKeyIsRefusedForItsWholeWindow: the tombstone of a key lasts
// expired_key_window counted from when its record expires, not from its
// completion: the key is refused just after its record expired and just
// inside the window's end, and new just outside it. The window is probed
// to the millisecond, so the case needs the store's clock moved (Advance).
func testExpiredKeyIsRefusedForItsWholeWindow(t *testing.T, h *harness) {
	if h.Advance == nil {
		t.Skip("probing a window to the millisecond needs the store's clock moved (Harness.Advance)")
	}
	ts := withTombstones(t, h.Store)
	ctx := context.Background()
	ttl := h.lease()
	window := 2 * ttl
	key := h.key("k")
	b := h.acquire(key, fingerprint(2), time.Minute)
	rec := *records()["binary body"]
	rec.Tombstone = window
	if err := ts.Complete(ctx, key, b, &rec, ttl); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	probe := func(after time.Duration, want store.State) {
		t.Helper()
		got, err := ts.Begin(ctx, key, store.Lease{Fingerprint: fingerprint(2)}, time.Minute)
		if err != nil {
			t.Fatalf("Begin %v after completion: %v", after, err)
		}
		if got.State != want {
			t.Fatalf("Begin %v after completion (ttl %v, window %v) = %v, want %v", after, ttl, window, got.State, want)
		}
	}
	h.pass(ttl + time.Millisecond)
	probe(ttl+time.Millisecond, store.Expired)
	h.pass(window - 2*time.Millisecond)
	probe(ttl+window-time.Millisecond, store.Expired)
	h.pass(2 * time.Millisecond)
	probe(ttl+window+time.Millisecond, store.Acquired)
}

// testStaleCompletionIsFencedWithTombstones: a completion whose lease was
// lost (here an operator deleted it and another request took the key)
// never overwrites the newer owner's lease or record, whether its record
// carries a tombstone (expired_keys: reject, a completion of its own on
// some stores) or not.
func testStaleCompletionIsFencedWithTombstones(t *testing.T, h *harness) {
	ts := withTombstones(t, h.Store)
	ctx := context.Background()
	for _, window := range []time.Duration{0, time.Hour} {
		t.Run(fmt.Sprint("tombstone ", window), func(t *testing.T) {
			key := h.key(fmt.Sprint("k-", window))
			old := h.acquire(key, fingerprint(1), time.Minute)
			if err := h.Store.Delete(ctx, key); err != nil {
				t.Fatalf("Delete of the running lease: %v", err)
			}
			owner := h.acquire(key, fingerprint(2), time.Minute)
			stale := *records()["binary body"]
			stale.Tombstone = window
			if err := ts.Complete(ctx, key, old, &stale, time.Hour); !errors.Is(err, store.ErrLockLost) {
				t.Fatalf("stale Complete over the new owner's lease = %v, want ErrLockLost", err)
			}
			if b := h.begin(key, fingerprint(3), time.Minute); b.State != store.InFlight || b.Fingerprint != fingerprint(2) {
				t.Fatalf("after the stale Complete Begin = %v fp %x, want in_flight of the new owner", b.State, b.Fingerprint[:4])
			}
			mine := *records()["empty body"]
			mine.Tombstone = window
			if err := ts.Complete(ctx, key, owner, &mine, time.Hour); err != nil {
				t.Fatalf("new owner's Complete: %v", err)
			}
			if err := ts.Complete(ctx, key, old, &stale, time.Hour); !errors.Is(err, store.ErrLockLost) {
				t.Fatalf("stale Complete over the new owner's record = %v, want ErrLockLost", err)
			}
			e, err := ts.Inspect(ctx, key)
			if err != nil || e.Record == nil || e.Record.Status != mine.Status || len(e.Record.Body) != 0 {
				t.Fatalf("Inspect after the stale Complete = %+v, %v; want the new owner's %d record", e, err, mine.Status)
			}
		})
	}
}
