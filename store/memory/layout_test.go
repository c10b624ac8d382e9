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

// TestACompletedEntryIsOneObjectForTheCollector checks that a completed
// record, its key and its owner token cost the garbage collector one heap
// object between them: with hundreds of thousands of records, every
// object more is marked again on every collection, on the proxy's CPU.
func TestACompletedEntryIsOneObjectForTheCollector(t *testing.T) {
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
		res, err := s.Begin(ctx, key, store.Fingerprint{}, time.Minute)
		if err != nil || res.State != store.Acquired {
			t.Fatalf("Begin %s: %+v, %v", key, res, err)
		}
		if err := s.Complete(ctx, key, res.Token, rec, time.Hour); err != nil {
			t.Fatalf("Complete %s: %v", key, err)
		}
	}
	perEntry := float64(liveObjects()-before) / n
	runtime.KeepAlive(s)
	// The maps' groups add a few objects in all; 2 or 3 per entry
	// means the key or the token became an object of its own again.
	if perEntry > 1.3 {
		t.Errorf("%.2f live heap objects per completed entry, want about 1", perEntry)
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
