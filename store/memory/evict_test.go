package memory

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// TestEvictOldestDropsOldestRecordsNeverLeases fills a store with records
// and one lease, then writes more: the oldest records go first, the lease
// never, and every eviction is counted.
func TestEvictOldestDropsOldestRecordsNeverLeases(t *testing.T) {
	rec := &store.Record{Status: 200, Body: make([]byte, 100)}
	per := recordSize("k00", rec)
	s, c := newTestStore(t, Options{MaxBytes: 5*per + entryOverhead + 10, WhenFull: store.EvictOldest, SweepInterval: -1})
	ctx := context.Background()
	lease, err := s.Begin(ctx, "lease", store.Lease{}, time.Hour)
	if err != nil {
		t.Fatalf("Begin lease: %v", err)
	}
	for i := range 8 {
		key := fmt.Sprintf("k%02d", i)
		b, err := s.Begin(ctx, key, store.Lease{}, time.Minute)
		if err != nil {
			t.Fatalf("Begin %s: %v", key, err)
		}
		if err := s.Complete(ctx, key, b.Token, rec, time.Hour); err != nil {
			t.Fatalf("Complete %s: %v", key, err)
		}
		c.Advance(time.Millisecond)
	}
	for i := range 8 {
		key := fmt.Sprintf("k%02d", i)
		_, err := s.Inspect(ctx, key)
		if gone := errors.Is(err, store.ErrNotFound); gone != (i < 3) {
			t.Errorf("Inspect %s = %v; want evicted only for the 3 oldest", key, err)
		}
	}
	if e, err := s.Inspect(ctx, "lease"); err != nil || e.State != store.InFlight {
		t.Fatalf("lease after evictions = %+v, %v; want in flight", e, err)
	}
	if err := s.Extend(ctx, "lease", lease.Token, time.Hour); err != nil {
		t.Fatalf("Extend of the lease: %v", err)
	}
	st := s.Stats()
	if st.Evictions != 3 || st.Records != 5 || st.Bytes != s.UsedBytes() || st.Bytes > 5*per+entryOverhead+10 {
		t.Fatalf("Stats = %+v, want 3 evictions, 5 records, bytes within the bound", st)
	}
}

// TestEvictOldestNeverEvictsLeases: a store full of leases still refuses.
func TestEvictOldestNeverEvictsLeases(t *testing.T) {
	s, _ := newTestStore(t, Options{MaxBytes: 2 * (entryOverhead + 2), WhenFull: store.EvictOldest, SweepInterval: -1})
	ctx := context.Background()
	for _, k := range []string{"k0", "k1"} {
		if _, err := s.Begin(ctx, k, store.Lease{}, time.Minute); err != nil {
			t.Fatalf("Begin %s: %v", k, err)
		}
	}
	if _, err := s.Begin(ctx, "k2", store.Lease{}, time.Minute); !errors.Is(err, store.ErrFull) {
		t.Fatalf("Begin when full of leases = %v, want ErrFull", err)
	}
	if h, _ := s.Health(ctx); !h.Full {
		t.Fatalf("Health when full of leases = %+v, want Full", h)
	}
	if st := s.Stats(); st.Evictions != 0 {
		t.Fatalf("Stats = %+v, want no evictions", st)
	}
}

func TestRejectDoesNotEvict(t *testing.T) {
	rec := &store.Record{Status: 200, Body: make([]byte, 100)}
	s, _ := newTestStore(t, Options{MaxBytes: recordSize("k0", rec) + 10, SweepInterval: -1})
	ctx := context.Background()
	b, _ := s.Begin(ctx, "k0", store.Lease{}, time.Minute)
	if err := s.Complete(ctx, "k0", b.Token, rec, time.Hour); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if _, err := s.Begin(ctx, "k1", store.Lease{}, time.Minute); !errors.Is(err, store.ErrFull) {
		t.Fatalf("Begin of a new key when full = %v, want ErrFull", err)
	}
	if _, err := s.Inspect(ctx, "k0"); err != nil {
		t.Fatalf("record after a refused Begin: %v", err)
	}
	if st := s.Stats(); st.Records != 1 || st.Evictions != 0 {
		t.Fatalf("Stats = %+v, want 1 record, no eviction", st)
	}
}

func TestListRejectsMalformedCursor(t *testing.T) {
	s, _ := newTestStore(t, Options{SweepInterval: -1})
	for _, c := range []string{"x", "99.", "-1.", "1.***", "64."} {
		if _, _, err := s.List(context.Background(), 0, c, 10); err == nil {
			t.Errorf("List with cursor %q succeeded, want an error", c)
		}
	}
	// The first and the last shard are a cursor's to name.
	for _, c := range []string{"0.", "63."} {
		if _, _, err := s.List(context.Background(), 0, c, 10); err != nil {
			t.Errorf("List with cursor %q: %v", c, err)
		}
	}
}

// TestListPagesReturnEachKeyOnceAndNoneAtItsExpiry: paged through, a
// listing returns every live key exactly once, however the pages fall
// within a shard, and an entry at exactly its expiry is not listed.
func TestListPagesReturnEachKeyOnceAndNoneAtItsExpiry(t *testing.T) {
	s, c := newTestStore(t, Options{SweepInterval: -1})
	ctx := context.Background()
	const keys = 500 // some eight to a shard: pages end inside shards
	for i := range keys {
		if _, err := s.Begin(ctx, fmt.Sprintf("k%03d", i), store.Lease{}, time.Hour); err != nil {
			t.Fatalf("Begin: %v", err)
		}
	}
	if _, err := s.Begin(ctx, "lapsing", store.Lease{}, time.Minute); err != nil {
		t.Fatalf("Begin: %v", err)
	}
	c.Advance(time.Minute)
	seen := map[string]int{}
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > keys {
			t.Fatal("the listing does not end")
		}
		got, next, err := s.List(ctx, 0, cursor, 7)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		for _, e := range got {
			seen[e.Key]++
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if seen["lapsing"] != 0 {
		t.Errorf("a lease at exactly its expiry was listed")
	}
	delete(seen, "lapsing")
	for k, n := range seen {
		if n != 1 {
			t.Errorf("%s listed %d times, want once", k, n)
		}
	}
	if len(seen) != keys {
		t.Errorf("%d keys listed, want %d", len(seen), keys)
	}
}

// TestListRefusesALimitThatIsNotPositive: a page of no entries is a
// caller's mistake, refused, not a listing of every key.
func TestListRefusesALimitThatIsNotPositive(t *testing.T) {
	s, _ := newTestStore(t, Options{SweepInterval: -1})
	if _, err := s.Begin(context.Background(), "k", store.Lease{}, time.Minute); err != nil {
		t.Fatalf("Begin: %v", err)
	}
	for _, limit := range []int{0, -1} {
		if got, _, err := s.List(context.Background(), 0, "", limit); err == nil {
			t.Errorf("List with limit %d = %d entries, want an error", limit, len(got))
		}
	}
}

// TestEvictOldestKeepsTheRecordBeingReplayed: Begin on a key that has a
// record needs no room, so it evicts nothing — least of all that record,
// which would make its own retry run again.
func TestEvictOldestKeepsTheRecordBeingReplayed(t *testing.T) {
	rec := &store.Record{Status: 200, Body: make([]byte, 100)}
	per := recordSize("k0", rec)
	s, _ := newTestStore(t, Options{MaxBytes: 2 * per, WhenFull: store.EvictOldest, SweepInterval: -1})
	ctx := context.Background()
	for _, k := range []string{"k0", "k1"} {
		b, err := s.Begin(ctx, k, store.Lease{}, time.Minute)
		if err == nil {
			err = s.Complete(ctx, k, b.Token, rec, time.Hour)
		}
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}
	b, err := s.Begin(ctx, "k0", store.Lease{}, time.Minute)
	if err != nil || b.State != store.Completed {
		t.Fatalf("Begin on the oldest record of a full store = %+v, %v; want completed", b, err)
	}
	if st := s.Stats(); st.Evictions != 0 {
		t.Fatalf("Stats = %+v, want no evictions for a replay", st)
	}
}

// TestEvictionPassesOverARecordAtItsExpiry: a record is expired from the
// instant of its expiry (as Get and the sweeper count it), so eviction
// passes over it there and takes the next record still live; when none is
// left, there is nothing to evict.
func TestEvictionPassesOverARecordAtItsExpiry(t *testing.T) {
	var q evictQueue
	q.push("a", 0, 10)
	q.push("b", 0, 20)
	if it, ok := q.pop(10); !ok || it.key != "b" {
		t.Fatalf("pop at a's expiry = %+v, %v; want b", it, ok)
	}
	q.push("c", 10, 30)
	if it, ok := q.pop(30); ok {
		t.Fatalf("pop at c's expiry = %+v; want none", it)
	}
}

// TestEvictOldestMakesRoomForACompletion: a lease taken while there was
// room, completed once records have filled the store, evicts the oldest
// record, and only as many as its record needs beyond its lease's bytes.
func TestEvictOldestMakesRoomForACompletion(t *testing.T) {
	rec := &store.Record{Status: 200, Body: make([]byte, 100)}
	per := recordSize("k00", rec)
	leaseBytes := int64(len("late")) + entryOverhead
	max := leaseBytes + 3*per
	s, c := newTestStore(t, Options{MaxBytes: max, WhenFull: store.EvictOldest, SweepInterval: -1})
	ctx := context.Background()
	late, err := s.Begin(ctx, "late", store.Lease{}, time.Hour)
	if err != nil {
		t.Fatalf("Begin late: %v", err)
	}
	for i := range 3 {
		key := fmt.Sprintf("k%02d", i)
		b, err := s.Begin(ctx, key, store.Lease{}, time.Minute)
		if err != nil {
			t.Fatalf("Begin %s: %v", key, err)
		}
		if err := s.Complete(ctx, key, b.Token, rec, time.Hour); err != nil {
			t.Fatalf("Complete %s: %v", key, err)
		}
		c.Advance(time.Millisecond)
	}
	if got := s.UsedBytes(); got != max {
		t.Fatalf("UsedBytes before the completion = %d, want the whole %d", got, max)
	}
	if err := s.Complete(ctx, "late", late.Token, rec, time.Hour); err != nil {
		t.Fatalf("Complete of the lease taken first, with the store full: %v; want the oldest record evicted", err)
	}
	if e, err := s.Inspect(ctx, "late"); err != nil || e.State != store.Completed {
		t.Errorf("Inspect late = %+v, %v; want the record it completed with", e, err)
	}
	for i, want := range []bool{false, true, true} {
		key := fmt.Sprintf("k%02d", i)
		if _, err := s.Inspect(ctx, key); (err == nil) != want {
			t.Errorf("Inspect %s = %v; want present %v", key, err, want)
		}
	}
	if st := s.Stats(); st.Evictions != 1 || st.Bytes > max {
		t.Errorf("stats %+v; want 1 eviction and at most %d bytes", st, max)
	}
}
