package filestore

import (
	"bytes"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/storetest"
)

// damageEntry replaces the bytes stored under key with what damage makes
// of them: what a flipped bit or a torn page leaves in the file.
func damageEntry(t *testing.T, s *Store, key string, damage func([]byte) []byte) {
	t.Helper()
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketKeys)
		v := b.Get([]byte(key))
		if v == nil {
			t.Fatalf("no entry under %q to damage", key)
		}
		return b.Put([]byte(key), damage(bytes.Clone(v)))
	})
	if err != nil {
		t.Fatal(err)
	}
}

var damages = map[string]func([]byte) []byte{
	"unknown kind": func(v []byte) []byte { v[0] = 'X'; return v },
	"cut short":    func(v []byte) []byte { return v[:headerLen-1] },
}

// complete acquires key and completes it with a record kept for ttl.
func complete(t *testing.T, s *Store, key string, ttl time.Duration) {
	t.Helper()
	tok := mustAcquire(t, s, key, time.Minute)
	if err := s.Complete(ctx, key, tok, testRecord("body"), ttl); err != nil {
		t.Fatal(err)
	}
}

// TestDamagedEntryIsUnreadableUntilDeleted: an entry whose bytes no longer
// decode may be the record of a key that was executed. Begin and Inspect
// report it unreadable, so that the proxy refuses the key whatever
// on_store_error says, and an operator's Delete removes it: the key is
// then new.
func TestDamagedEntryIsUnreadableUntilDeleted(t *testing.T) {
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s, _ := open(t, dir, Options{})
			complete(t, s, "k", time.Hour)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s, _ = open(t, dir, Options{}) // nothing of the record in memory
			damageEntry(t, s, "k", damage)
			if b, err := s.Begin(ctx, "k", store.Lease{}, time.Minute); !errors.Is(err, store.ErrUnreadable) {
				t.Fatalf("Begin of a damaged entry = %v, %v; want ErrUnreadable", b.State, err)
			}
			if _, err := s.Inspect(ctx, "k"); !errors.Is(err, store.ErrUnreadable) {
				t.Errorf("Inspect of a damaged entry = %v, want ErrUnreadable", err)
			}
			if err := s.Delete(ctx, "k"); err != nil {
				t.Fatalf("Delete of a damaged entry = %v", err)
			}
			mustAcquire(t, s, "k", time.Minute)
		})
	}
}

// TestDamagedEntryStopsNeitherTheSweepNorNewKeys: the sweep passes a
// damaged entry by, leaving it to refuse its key until an operator deletes
// it, and deletes the expired entries after it, so that a store at its
// max_bytes still makes room for new keys.
func TestDamagedEntryStopsNeitherTheSweepNorNewKeys(t *testing.T) {
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			first, _ := open(t, dir, Options{})
			complete(t, first, "a", time.Minute)
			complete(t, first, "b", 2*time.Minute)
			used := first.Stats().Bytes
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}
			s, c := open(t, dir, Options{MaxBytes: used + entrySize("new", 0)/2})
			damageEntry(t, s, "a", damage)
			if _, err := s.Begin(ctx, "new", store.Lease{}, time.Minute); !errors.Is(err, store.ErrFull) {
				t.Fatalf("Begin of a new key in a full store = %v, want ErrFull", err)
			}
			c.Advance(time.Hour)
			if b, err := s.Begin(ctx, "new", store.Lease{}, time.Minute); err != nil || b.State != store.Acquired {
				t.Fatalf("Begin of a new key once the records expired = %v, %v; want acquired", b.State, err)
			}
			sweep(t, s, 1) // the new lease's
			if _, err := s.Begin(ctx, "a", store.Lease{}, time.Minute); !errors.Is(err, store.ErrUnreadable) {
				t.Errorf("Begin of the damaged entry after the sweep = %v, want ErrUnreadable", err)
			}
		})
	}
}

// TestDamagedEntryIsListedAndTheListingGoesOn: an entry whose bytes do not
// decode — its header, or the record after it — is listed as an
// unreadable record under its key, in every page size, and the entries
// around it are listed too: one damaged entry never stops an operator
// from paging through the store.
func TestDamagedEntryIsListedAndTheListingGoesOn(t *testing.T) {
	all := map[string]func([]byte) []byte{
		"record of another format": func(v []byte) []byte { return append(v[:headerLen], 0xff, 0xfe) },
	}
	maps.Copy(all, damages)
	for name, damage := range all {
		t.Run(name, func(t *testing.T) {
			s, _ := open(t, t.TempDir(), Options{})
			for _, k := range []string{"a", "b", "c"} {
				complete(t, s, k, time.Hour)
			}
			mustAcquire(t, s, "d", time.Minute)
			damageEntry(t, s, "b", damage)
			for _, limit := range []int{1, 2, 10} {
				got := storetest.ListAll(t, s, limit)
				var keys []string
				for _, e := range got {
					keys = append(keys, e.Key)
					if damaged := e.Key == "b"; damaged != errors.Is(e.Unreadable, store.ErrCorrupt) {
						t.Errorf("limit %d: %s listed with Unreadable %v", limit, e.Key, e.Unreadable)
					}
				}
				if want := []string{"a", "b", "c", "d"}; !slices.Equal(keys, want) {
					t.Fatalf("limit %d: listed %q, want %q", limit, keys, want)
				}
				if b := got[1]; b.State != store.Completed || b.Record != nil {
					t.Errorf("limit %d: damaged b listed as %v with record %v; want completed, no record", limit, b.State, b.Record)
				}
			}
			inFlight, _, err := s.List(ctx, store.InFlight, "", 10)
			if err != nil || len(inFlight) != 1 || inFlight[0].Key != "d" {
				t.Errorf("List of the keys in flight = %+v, %v; want d alone", inFlight, err)
			}
		})
	}
}
