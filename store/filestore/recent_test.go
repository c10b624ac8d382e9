package filestore

import (
	"context"
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

// What recent holds stays within its bound, and a large record is not kept.
func TestRecentIsBounded(t *testing.T) {
	var r recent
	enc := []byte(strings.Repeat("x", 1<<10))
	for i := range 2 * recentBytes / len(enc) {
		r.fill("k"+strconv.Itoa(i), entry{kind: kindRecord, expires: 1, enc: enc}, r.version())
		if r.bytes > recentBytes {
			t.Fatalf("after %d records, %d bytes held, bound %d", i+1, r.bytes, recentBytes)
		}
	}
	r.fill("large", entry{kind: kindRecord, expires: 1, enc: make([]byte, recentMaxRecord+1)}, r.version())
	if _, ok := r.get("large", 0); ok {
		t.Error("a record over recentMaxRecord is held")
	}
}
