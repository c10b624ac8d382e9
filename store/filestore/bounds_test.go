package filestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// TestUsedBytesCountsTheKeyTwice: an entry costs its key twice (the entry
// and its index entry), its encoding and the overhead, as max_bytes
// counts it.
func TestUsedBytesCountsTheKeyTwice(t *testing.T) {
	s, _ := open(t, t.TempDir(), Options{})
	mustAcquire(t, s, "a-key", time.Minute)
	if got, want := s.Stats().Bytes, int64(2*len("a-key"))+entryOverhead; got != want {
		t.Errorf("Bytes with one lease = %d, want %d", got, want)
	}
}

// TestSweeperReclaimsOnItsOwn: with a sweep_interval, expired entries are
// reclaimed without any request touching them.
func TestSweeperReclaimsOnItsOwn(t *testing.T) {
	s, c := open(t, t.TempDir(), Options{SweepInterval: time.Millisecond})
	mustAcquire(t, s, "abandoned", time.Minute)
	c.Advance(2 * time.Minute)
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if st := s.Stats(); st.Bytes != 0 {
			return fmt.Errorf("Stats = %+v after the lease expired, want empty", st)
		}
		return nil
	})
}

// TestAShorterRenewalIsReclaimedAtItsNewEnd: a lease renewed for less than
// it had is swept once the shorter renewal ends, not at the first end.
func TestAShorterRenewalIsReclaimedAtItsNewEnd(t *testing.T) {
	s, c := open(t, t.TempDir(), Options{})
	tok := mustAcquire(t, s, "k", time.Hour)
	if err := s.Extend(ctx, "k", tok, time.Minute); err != nil {
		t.Fatal(err)
	}
	c.Advance(2 * time.Minute)
	sweep(t, s, 0)
	if st := s.Stats(); st.Bytes != 0 {
		t.Errorf("Stats after the shorter renewal ended = %+v, want empty", st)
	}
}

// TestListRefusesALimitThatIsNotPositive: a page of no entries is a
// caller's mistake, refused, not a listing of every key.
func TestListRefusesALimitThatIsNotPositive(t *testing.T) {
	s, _ := open(t, t.TempDir(), Options{})
	mustAcquire(t, s, "k", time.Minute)
	for _, limit := range []int{0, -1} {
		if got, _, err := s.List(ctx, 0, "", limit); err == nil {
			t.Errorf("List with limit %d = %d entries, want an error", limit, len(got))
		}
	}
}

// TestListPagesReturnEachKeyOnceAndNoneAtItsExpiry: paged through, a
// listing returns every live key exactly once, and an entry at exactly its
// expiry is not listed.
func TestListPagesReturnEachKeyOnceAndNoneAtItsExpiry(t *testing.T) {
	s, c := open(t, t.TempDir(), Options{})
	const keys = 20
	for i := range keys {
		mustAcquire(t, s, fmt.Sprintf("k%02d", i), time.Hour)
	}
	mustAcquire(t, s, "lapsing", time.Minute)
	c.Advance(time.Minute)
	seen := map[string]int{}
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > keys {
			t.Fatal("the listing does not end")
		}
		got, next, err := s.List(ctx, 0, cursor, 3)
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

// TestHealthIsFullWhenATypicalLeaseWouldNotFit: a store with room for
// exactly one more typical lease is not full; one byte less, it is.
func TestHealthIsFullWhenATypicalLeaseWouldNotFit(t *testing.T) {
	for _, tt := range []struct {
		max  int64
		want bool
	}{{typicalLease, false}, {typicalLease - 1, true}} {
		s, _ := open(t, t.TempDir(), Options{MaxBytes: tt.max})
		h, err := s.Health(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if h.Full != tt.want {
			t.Errorf("Health().Full with max_bytes %d and %d used = %v, want %v", tt.max, s.Stats().Bytes, h.Full, tt.want)
		}
	}
}

// TestANegativeSweepIntervalRunsNoSweeper: a negative sweep_interval
// disables the sweeper, rather than meaning the default.
func TestANegativeSweepIntervalRunsNoSweeper(t *testing.T) {
	s, _ := open(t, t.TempDir(), Options{SweepInterval: -1})
	select {
	case <-s.swept: // closed at Open: no sweeper to wait for
	default:
		t.Error("a sweeper runs with a negative sweep interval")
	}
}

// TestALeaseAndARecordLapseAtTheirTTL: an entry lives until its TTL has
// passed and not an instant more: at exactly lock_ttl the key is free to
// take again, and at exactly the record's TTL it is gone.
func TestALeaseAndARecordLapseAtTheirTTL(t *testing.T) {
	s, c := open(t, t.TempDir(), Options{})
	mustAcquire(t, s, "k", time.Minute)
	c.Advance(time.Minute - time.Nanosecond)
	if b, err := s.Begin(ctx, "k", store.Lease{}, time.Minute); err != nil || b.State != store.InFlight {
		t.Fatalf("Begin just before the lease's end = %v, %v; want in flight", b.State, err)
	}
	c.Advance(time.Nanosecond)
	if _, err := s.Inspect(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Inspect at exactly the lease's end = %v, want not found", err)
	}
	tok := mustAcquire(t, s, "k", time.Minute)
	if err := s.Complete(ctx, "k", tok, testRecord("body"), time.Hour); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Hour)
	mustAcquire(t, s, "k", time.Minute)
}

// TestAMissingOrShortReserveIsWrittenInFull: the reserve that lets a full
// disk still free space is written in full at Open over a short one, and
// by the sweeper when it is missing and the disk has room.
func TestAMissingOrShortReserveIsWrittenInFull(t *testing.T) {
	dir := t.TempDir()
	reserve := filepath.Join(dir, reserveFile)
	if err := os.WriteFile(reserve, []byte{0}, 0o600); err != nil {
		t.Fatal(err)
	}
	s, _ := open(t, dir, Options{})
	if st, err := os.Stat(reserve); err != nil || st.Size() != reserveBytes {
		t.Fatalf("reserve after Open over a short one: %v, %v; want %d bytes", st, err, reserveBytes)
	}
	if err := os.Remove(reserve); err != nil {
		t.Fatal(err)
	}
	s.refillReserve()
	if st, err := os.Stat(reserve); err != nil || st.Size() != reserveBytes {
		t.Fatalf("reserve refilled by the sweeper: %v, %v; want %d bytes", st, err, reserveBytes)
	}
}

// TestTheSweeperWorksThroughABacklogWithoutPausing: a sweep that stops at
// its bound is followed at once by the next, not after sweep_interval.
func TestTheSweeperWorksThroughABacklogWithoutPausing(t *testing.T) {
	dir := t.TempDir()
	s, c := open(t, dir, Options{})
	for i := range sweepBatch + 10 {
		mustAcquire(t, s, "k"+strconv.Itoa(i), time.Minute)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Hour)
	s, err := Open(Options{Path: dir, Now: c.Now, SweepInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	wait.SucceedsSoon(t, 30*time.Second, func() error {
		if st := s.Stats(); st.Bytes != 0 {
			return fmt.Errorf("Stats = %+v, want every expired lease swept", st)
		}
		return nil
	})
}

// TestASweepStopsAtItsBound: one sweep examines at most the entries it is
// given, so a backlog is swept in short transactions, and says it stopped
// at its bound.
func TestASweepStopsAtItsBound(t *testing.T) {
	s, c := open(t, t.TempDir(), Options{})
	for i := range 5 {
		mustAcquire(t, s, "k"+strconv.Itoa(i), time.Minute)
	}
	c.Advance(time.Hour)
	var more bool
	if err := s.write(ctx, "sweep", func(tx *txn) (err error) { more, err = tx.sweep(2); return err }); err != nil {
		t.Fatal(err)
	}
	if want := 3 * entrySize("k0", 0); !more || s.Stats().Bytes != want {
		t.Errorf("a sweep of 2 of 5 expired leases: more %v, %d bytes left; want true, %d", more, s.Stats().Bytes, want)
	}
}

// TestASweepAtAnEntrysExpiryReclaimsIt: the sweeper reclaims an entry
// from the instant it expires.
func TestASweepAtAnEntrysExpiryReclaimsIt(t *testing.T) {
	s, c := open(t, t.TempDir(), Options{})
	mustAcquire(t, s, "k", time.Minute)
	c.Advance(time.Minute)
	sweep(t, s, 0)
	if st := s.Stats(); st.Bytes != 0 {
		t.Errorf("Stats after a sweep at the lease's expiry = %+v, want empty", st)
	}
}

// TestEvictOldestWithOnlyLeasesIsFull: under evict_oldest a store holding
// only leases has nothing to evict, and refuses a new key with ErrFull
// rather than grow past max_bytes.
func TestEvictOldestWithOnlyLeasesIsFull(t *testing.T) {
	max := 2 * entrySize("k0", 0)
	s, _ := open(t, t.TempDir(), Options{MaxBytes: max, WhenFull: store.EvictOldest})
	mustAcquire(t, s, "k0", time.Hour)
	mustAcquire(t, s, "k1", time.Hour) // exactly max_bytes
	if _, err := s.Begin(ctx, "k2", store.Lease{}, time.Hour); !errors.Is(err, store.ErrFull) {
		t.Errorf("Begin with only leases held = %v, want ErrFull", err)
	}
	if st := s.Stats(); st.Bytes != max {
		t.Errorf("Stats = %+v, want the %d bytes of two leases", st, max)
	}
}

// TestEvictionsCountTheRecordsEvicted: the evictions counter is the
// number of records evict_oldest dropped.
func TestEvictionsCountTheRecordsEvicted(t *testing.T) {
	s, _ := open(t, t.TempDir(), Options{MaxBytes: 3000, WhenFull: store.EvictOldest})
	for i := range 20 {
		key := "r" + strconv.Itoa(i)
		tok := mustAcquire(t, s, key, time.Minute)
		if err := s.Complete(ctx, key, tok, testRecord(strings.Repeat("y", 200)), time.Hour); err != nil {
			t.Fatalf("Complete %s: %v", key, err)
		}
	}
	gone := uint64(0)
	for i := range 20 {
		if _, err := s.Inspect(ctx, "r"+strconv.Itoa(i)); errors.Is(err, store.ErrNotFound) {
			gone++
		}
	}
	if st := s.Stats(); gone == 0 || st.Evictions != gone {
		t.Errorf("Stats = %+v with %d records gone; want that many evictions", st, gone)
	}
}

// TestAReserveThatDoesNotFitLeavesNoPartialFile: on a disk without room
// for the reserve, the store opens (serving what is there) and leaves no
// half-written reserve taking what space there is.
func TestAReserveThatDoesNotFitLeavesNoPartialFile(t *testing.T) {
	dir := smallDisk(t, int(reserveBytes/2))
	s, _ := open(t, dir, Options{})
	if _, err := os.Stat(filepath.Join(dir, reserveFile+".tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a partial reserve is left: %v", err)
	}
	if h, _ := s.Health(ctx); !h.Full {
		t.Errorf("Health = %+v on a disk without room for the reserve, want full", h)
	}
}
