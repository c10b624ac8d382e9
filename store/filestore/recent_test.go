package filestore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// A record replayed from memory is replayed only while the database holds
// it: after the key API deleted it, after it expired, after a sweep or an
// eviction dropped it, and after a restart, Begin says what the database
// says.
func TestReplayFromMemoryNeverOutlivesItsRecord(t *testing.T) {
	ctx := context.Background()
	rec := &store.Record{Status: 201, Body: []byte(`{"id":1}`)}
	complete := func(t *testing.T, s *Store, key string, ttl time.Duration) {
		t.Helper()
		b, err := s.Begin(ctx, key, store.Lease{}, time.Minute)
		if err != nil || b.State != store.Acquired {
			t.Fatalf("Begin(%s) = %v, %v", key, b.State, err)
		}
		if err := s.Complete(ctx, key, b.Token, rec, ttl); err != nil {
			t.Fatal(err)
		}
	}
	want := func(t *testing.T, s *Store, key string, state store.State) {
		t.Helper()
		b, err := s.Begin(ctx, key, store.Lease{}, time.Minute)
		if err != nil || b.State != state {
			t.Fatalf("Begin(%s) = %v, %v; want %v", key, b.State, err, state)
		}
	}
	held := func(t *testing.T, s *Store, key string) {
		t.Helper()
		if _, ok := s.recent.get(key, s.now().UnixNano()); !ok {
			t.Fatalf("%s is not held in memory: the case does not test it", key)
		}
	}

	t.Run("deleted", func(t *testing.T) {
		s, _ := open(t, t.TempDir(), Options{})
		complete(t, s, "k", time.Hour)
		want(t, s, "k", store.Completed)
		held(t, s, "k")
		if err := s.Delete(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		want(t, s, "k", store.Acquired)
	})
	t.Run("expired", func(t *testing.T) {
		s, c := open(t, t.TempDir(), Options{})
		complete(t, s, "k", time.Minute)
		held(t, s, "k")
		c.Advance(time.Minute - time.Millisecond)
		want(t, s, "k", store.Completed)
		c.Advance(time.Millisecond)
		want(t, s, "k", store.Acquired)
	})
	t.Run("swept", func(t *testing.T) {
		s, c := open(t, t.TempDir(), Options{})
		complete(t, s, "k", time.Minute)
		held(t, s, "k")
		c.Advance(time.Minute)
		if err := s.write(ctx, "sweep", func(t *txn) error { _, err := t.sweep(sweepBatch); return err }); err != nil {
			t.Fatal(err)
		}
		if _, ok := s.recent.m["k"]; ok {
			t.Error("the swept record is still held in memory")
		}
	})
	t.Run("evicted", func(t *testing.T) {
		s, _ := open(t, t.TempDir(), Options{MaxBytes: 4 << 10, WhenFull: store.EvictOldest})
		complete(t, s, "a", time.Minute)
		held(t, s, "a")
		for i := range 40 {
			complete(t, s, "b"+strconv.Itoa(i), time.Hour)
		}
		if s.Stats().Evictions == 0 {
			t.Fatal("nothing was evicted: the case does not test it")
		}
		want(t, s, "a", store.Acquired)
	})
	t.Run("read after a restart, then deleted", func(t *testing.T) {
		dir := t.TempDir()
		s, err := Open(Options{Path: dir, SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		complete(t, s, "k", time.Hour)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s, err = Open(Options{Path: dir, SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		want(t, s, "k", store.Completed)
		held(t, s, "k")
		if err := s.Delete(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		want(t, s, "k", store.Acquired)
	})
}

// A record read from the database while a commit deleted it is not kept:
// the deletion, applied after the read began, wins.
func TestRecordReadBeforeACommitIsNotKept(t *testing.T) {
	var r recent
	e := entry{kind: kindRecord, expires: 100, enc: []byte("rec")}
	v := r.version()
	r.apply([]change{{key: "k"}}, true)
	r.fill("k", e, v)
	if _, ok := r.get("k", 0); ok {
		t.Fatal("a record read before a commit that deleted it is held")
	}
	r.fill("k", e, r.version())
	if _, ok := r.get("k", 0); !ok {
		t.Fatal("a record read with no commit since is not held")
	}
	if _, ok := r.get("k", 100); ok {
		t.Fatal("a record held past its expiry is answered")
	}
}

// What recent holds stays within its bound, counted from the records it
// holds rather than from its own tally; records that fill the bound
// exactly are all kept; a record of exactly recentMaxRecord is kept and a
// larger one is not.
func TestRecentIsBounded(t *testing.T) {
	held := func(r *recent) (n int, bytes int64) {
		for k, e := range r.m {
			n++
			bytes += int64(len(k) + len(e.enc))
		}
		return n, bytes
	}

	var r recent
	enc := []byte(strings.Repeat("x", 1<<10))
	for i := range 2 * recentBytes / len(enc) {
		r.fill("k"+strconv.Itoa(i), entry{kind: kindRecord, expires: 1, enc: enc}, r.version())
		if _, b := held(&r); b > recentBytes || b != r.bytes {
			t.Fatalf("after %d records, %d bytes held (tally %d), bound %d", i+1, b, r.bytes, recentBytes)
		}
	}

	var full recent
	const n = recentBytes / recentMaxRecord
	for i := range n {
		key := fmt.Sprintf("k%02d", i)
		full.fill(key, entry{kind: kindRecord, expires: 1, enc: make([]byte, recentMaxRecord-len(key))}, full.version())
	}
	if got, b := held(&full); got != n || b != recentBytes {
		t.Errorf("records filling the bound exactly: %d held in %d bytes, want %d in %d", got, b, n, recentBytes)
	}

	var one recent
	one.fill("max", entry{kind: kindRecord, expires: 1, enc: make([]byte, recentMaxRecord)}, one.version())
	if _, ok := one.get("max", 0); !ok {
		t.Error("a record of exactly recentMaxRecord is not held")
	}
	one.fill("large", entry{kind: kindRecord, expires: 1, enc: make([]byte, recentMaxRecord+1)}, one.version())
	if _, ok := one.get("large", 0); ok {
		t.Error("a record over recentMaxRecord is held")
	}
}
