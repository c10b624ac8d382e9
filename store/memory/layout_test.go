package memory

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// TestCompletedEntriesAreNotObjectsOfTheirOwn checks that completed
// records, their keys and their owner tokens cost the garbage collector no
// heap object each: they lie in a few large slabs. With hundreds of
// thousands of records, every object per record is marked again on every
// collection, on the proxy's CPU.
func TestCompletedEntriesAreNotObjectsOfTheirOwn(t *testing.T) {
	const n = 20000
	s, _ := newTestStore(t, Options{SweepInterval: -1})
	ctx := context.Background()
	rec := &store.Record{
		Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   []byte(`{"id":"ch_1"}`),
	}
	before := liveObjects()
	for i := range n {
		// A key of a storage key's length, made here and kept by nothing
		// but the store.
		key := fmt.Sprintf("idem:%064d", i)
		res, err := s.Begin(ctx, key, store.Lease{}, time.Minute)
		if err != nil || res.State != store.Acquired {
			t.Fatalf("Begin %s: %+v, %v", key, res, err)
		}
		if err := s.Complete(ctx, key, res.Token, rec, time.Hour); err != nil {
			t.Fatalf("Complete %s: %v", key, err)
		}
	}
	perEntry := float64(liveObjects()-before) / n
	runtime.KeepAlive(s)
	// Slabs of up to 64 KiB, the slots and the index add a few hundred
	// objects in all, 0.05 per entry here; one or more per entry means
	// records, keys or tokens became objects of their own again.
	if perEntry > 0.25 {
		t.Errorf("%.2f live heap objects per completed entry, want far fewer than one", perEntry)
	}
	if got := s.records.Load(); got != n {
		t.Fatalf("%d records, want %d", got, n)
	}
}

// liveObjects collects garbage and returns the number of heap objects that
// survived.
func liveObjects() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapObjects)
}

// TestDroppedRecordsFreeTheirMemoryWhenEvictingOldest checks that under
// evict_oldest a record the store no longer holds — deleted, or expired
// and swept behind a record with a longer TTL — does not stay in memory
// through the eviction queue, which keeps its items until they reach the
// front: the heap would outgrow max_bytes with nothing left to evict.
func TestDroppedRecordsFreeTheirMemoryWhenEvictingOldest(t *testing.T) {
	const n, bodySize = 500, 32 << 10
	s, c := newTestStore(t, Options{MaxBytes: 1 << 30, WhenFull: store.EvictOldest, SweepInterval: -1})
	ctx := context.Background()
	fill := func(prefix string, n int, body []byte, ttl time.Duration) {
		t.Helper()
		rec := &store.Record{Status: http.StatusOK, Body: body}
		for i := range n {
			key := fmt.Sprintf("%s-%d", prefix, i)
			res, err := s.Begin(ctx, key, store.Lease{}, time.Minute)
			if err != nil || res.State != store.Acquired {
				t.Fatalf("Begin %s: %+v, %v", key, res, err)
			}
			if err := s.Complete(ctx, key, res.Token, rec, ttl); err != nil {
				t.Fatalf("Complete %s: %v", key, err)
			}
		}
	}
	body := make([]byte, bodySize)
	// One long-lived record first: the queue's front stays unexpired.
	fill("long", 1, nil, 72*time.Hour)
	before := liveBytes()

	fill("deleted", n, body, time.Hour)
	for i := range n {
		if err := s.Delete(ctx, fmt.Sprintf("deleted-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	fill("expired", n, body, time.Minute)
	c.Advance(2 * time.Minute)
	for i := range shardCount {
		s.sweepShard(i)
	}

	if got := s.records.Load(); got != 1 {
		t.Fatalf("%d records, want the long-lived one only", got)
	}
	// 2n dropped records of 32 KiB each would be 32 MiB; a key each is
	// a few KiB.
	if grown := liveBytes() - before; grown > 1<<20 {
		t.Errorf("the live heap grew by %d KiB for records the store dropped", grown>>10)
	}
	runtime.KeepAlive(s)
}

// liveBytes collects garbage and returns the bytes of live heap objects.
func liveBytes() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
