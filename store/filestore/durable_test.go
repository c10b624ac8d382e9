package filestore

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

var ctx = context.Background()

func testRecord(body string) *store.Record {
	return &store.Record{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}},
		Body: []byte(body), CreatedAt: time.UnixMilli(1_700_000_000_000).UTC()}
}

func mustAcquire(t *testing.T, s *Store, key string, lease time.Duration) string {
	t.Helper()
	b, err := s.Begin(ctx, key, store.Lease{}, lease)
	if err != nil || b.State != store.Acquired {
		t.Fatalf("Begin(%q) = %v, %v; want acquired", key, b.State, err)
	}
	return b.Token
}

// TestReopenedStoreHasEveryLeaseAndRecord closes a store and opens its
// directory again: leases and records are there, with their size
// counters, read from the file rather than counted.
func TestReopenedStoreHasEveryLeaseAndRecord(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Path: dir, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	leaseTok := mustAcquire(t, s, "leased", time.Hour)
	tok := mustAcquire(t, s, "done", time.Hour)
	if err := s.Complete(ctx, "done", tok, testRecord(`{"ok":true}`), time.Hour); err != nil {
		t.Fatal(err)
	}
	stats := s.Stats()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(Options{Path: dir, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Stats(); got != stats || got.Records != 1 {
		t.Errorf("Stats after reopening = %+v, want %+v with 1 record", got, stats)
	}
	if b, err := s.Begin(ctx, "leased", store.Lease{}, time.Hour); err != nil || b.State != store.InFlight {
		t.Errorf("Begin on the lease after reopening = %v, %v; want in flight", b.State, err)
	}
	if err := s.Extend(ctx, "leased", leaseTok, time.Hour); err != nil {
		t.Errorf("Extend by the lease's owner after reopening: %v", err)
	}
	b, err := s.Begin(ctx, "done", store.Lease{}, time.Hour)
	if err != nil || b.State != store.Completed || string(b.Record.Body) != `{"ok":true}` {
		t.Errorf("Begin on the record after reopening = %+v, %v; want the record", b, err)
	}
}

// TestSecondOpenOfADirectoryIsRefused: a second store on a directory in
// use fails naming the directory and the holder's pid, and the first
// keeps working.
func TestSecondOpenOfADirectoryIsRefused(t *testing.T) {
	dir := t.TempDir()
	first, _ := open(t, dir, Options{})
	second, err := Open(Options{Path: dir})
	if err == nil {
		second.Close()
		t.Fatal("second Open of one directory succeeded, want it refused")
	}
	if !errors.Is(err, store.ErrInUse) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Errorf("second Open: %v; want ErrInUse naming %s and pid %d", err, dir, os.Getpid())
	}
	mustAcquire(t, first, "still-mine", time.Minute)
}

// TestFullStoreRefusesNewKeysAndKeepsLeases fills a store under reject:
// a new key is refused with ErrFull, a record that does not fit leaves its
// lease to be extended and completed smaller, and nothing is evicted.
func TestFullStoreRefusesNewKeysAndKeepsLeases(t *testing.T) {
	s, _ := open(t, t.TempDir(), Options{MaxBytes: 2000})
	tok := mustAcquire(t, s, "big", time.Minute)
	for i := 0; ; i++ {
		_, err := s.Begin(ctx, "k"+strconv.Itoa(i), store.Lease{}, time.Minute)
		if errors.Is(err, store.ErrFull) {
			break
		}
		if err != nil || i > 100 {
			t.Fatalf("Begin %d: %v; want ErrFull within 100 leases", i, err)
		}
	}
	if h, _ := s.Health(ctx); !h.Full {
		t.Errorf("Health = %+v, want full", h)
	}
	err := s.Complete(ctx, "big", tok, testRecord(strings.Repeat("x", 4000)), time.Hour)
	if !errors.Is(err, store.ErrFull) {
		t.Fatalf("Complete of a record that does not fit: %v, want ErrFull", err)
	}
	if err := s.Extend(ctx, "big", tok, time.Minute); err != nil {
		t.Fatalf("Extend after a full Complete: %v, want the lease kept", err)
	}
	if err := s.Release(ctx, "k0", ""); err != nil {
		t.Fatal(err)
	}
	if b, _ := s.Begin(ctx, "k0", store.Lease{}, time.Minute); b.State != store.InFlight {
		t.Errorf("a lease of the full store: %v, want still in flight", b.State)
	}
	if st := s.Stats(); st.Evictions != 0 || st.Bytes > 2000 {
		t.Errorf("Stats = %+v, want no evictions within the bound", st)
	}
}

// TestEvictOldestDropsRecordsNeverLeases: under evict_oldest a full store
// drops the record nearest its expiry to make room, never a lease.
func TestEvictOldestDropsRecordsNeverLeases(t *testing.T) {
	s, c := open(t, t.TempDir(), Options{MaxBytes: 3000, WhenFull: store.EvictOldest})
	lease := mustAcquire(t, s, "lease", time.Hour)
	for i := range 20 {
		key := "r" + strconv.Itoa(i)
		tok := mustAcquire(t, s, key, time.Minute)
		if err := s.Complete(ctx, key, tok, testRecord(strings.Repeat("y", 200)), time.Hour); err != nil {
			t.Fatalf("Complete %s: %v", key, err)
		}
		c.Advance(time.Second)
	}
	st := s.Stats()
	if st.Evictions == 0 || st.Bytes > 3000 {
		t.Fatalf("Stats = %+v, want evictions within the bound", st)
	}
	if _, err := s.Inspect(ctx, "r0"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("oldest record: %v, want evicted", err)
	}
	if _, err := s.Inspect(ctx, "r19"); err != nil {
		t.Errorf("newest record: %v, want kept", err)
	}
	if err := s.Extend(ctx, "lease", lease, time.Hour); err != nil {
		t.Errorf("lease after evictions: %v, want kept", err)
	}
}

// TestSweepReclaimsExpiredEntries lets records and an abandoned lease
// expire: the sweep deletes them, the counters return to zero, and a
// renewed lease is kept and indexed at its new expiry.
func TestSweepReclaimsExpiredEntries(t *testing.T) {
	s, c := open(t, t.TempDir(), Options{})
	for i := range 50 {
		key := "r" + strconv.Itoa(i)
		tok := mustAcquire(t, s, key, time.Minute)
		if err := s.Complete(ctx, key, tok, testRecord("body"), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	mustAcquire(t, s, "abandoned", time.Minute)
	renewed := mustAcquire(t, s, "renewed", time.Minute)
	c.Advance(50 * time.Second)
	if err := s.Extend(ctx, "renewed", renewed, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Hour)
	sweep(t, s, 1)
	st := s.Stats()
	if st.Records != 0 || st.Bytes != entrySize("renewed", 0) {
		t.Errorf("Stats after the sweep = %+v, want no records and only the renewed lease's %d bytes", st, entrySize("renewed", 0))
	}
	if err := s.Extend(ctx, "renewed", renewed, time.Minute); err != nil {
		t.Errorf("renewed lease after the sweep: %v", err)
	}
	c.Advance(2 * time.Hour)
	sweep(t, s, 0)
	if st := s.Stats(); st.Bytes != 0 {
		t.Errorf("Stats after every entry expired = %+v, want empty", st)
	}
}

// sweep runs sweeps until one finds nothing more to do, and checks that
// the expiry index then holds index entries.
func sweep(t *testing.T, s *Store, index int) {
	t.Helper()
	for more := true; more; {
		if err := s.write(ctx, "sweep", func(tx *txn) (err error) { more, err = tx.sweep(sweepBatch); return err }); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	_ = s.db.View(func(tx *boltTx) error { n = tx.Bucket(bucketExpiry).Stats().KeyN; return nil })
	if n != index {
		t.Errorf("expiry index holds %d entries after the sweep, want %d", n, index)
	}
}

// TestClosedStoreIsUnavailable: every operation on a closed store fails
// with store.ErrUnavailable, so the proxy applies on_store_error.
func TestClosedStoreIsUnavailable(t *testing.T) {
	s, err := Open(Options{Path: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, beginErr := s.Begin(ctx, "k", store.Lease{}, time.Minute)
	_, inspectErr := s.Inspect(ctx, "k")
	_, _, listErr := s.List(ctx, 0, "", 10)
	for name, err := range map[string]error{
		"Begin": beginErr, "Inspect": inspectErr, "List": listErr,
		"Extend": s.Extend(ctx, "k", "t", time.Minute), "Release": s.Release(ctx, "k", "t"),
		"Delete": s.Delete(ctx, "k"), "Ping": s.Ping(ctx),
	} {
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s on a closed store: %v, want ErrUnavailable", name, err)
		}
	}
}
