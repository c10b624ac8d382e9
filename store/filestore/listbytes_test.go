package filestore

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// TestPageOfLargeRecordsReadsABoundedAmount: a page of a listing keeps
// what it read of each sealed record, so it reads at most listBytes of
// entries, as many as fit exactly, ending early with a cursor, however high its limit; an entry
// larger than that alone is still listed, on a page of its own; and paging
// on lists every key once.
func TestPageOfLargeRecordsReadsABoundedAmount(t *testing.T) {
	s, _ := open(t, t.TempDir(), Options{})
	sizes := map[string]int{"big": 5000}
	for i := range 10 {
		sizes[fmt.Sprintf("k%02d", i)] = 1000
	}
	for k, n := range sizes {
		tok := mustAcquire(t, s, k, time.Minute)
		rec := &store.Record{Status: 201, Sealed: &store.Sealed{KeyID: "k1", BodyBytes: n, Data: bytes.Repeat([]byte("x"), n)}}
		if err := s.Complete(ctx, k, tok, rec, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	// Exactly three of the 1,000-byte records fit in a page.
	var n int
	if err := s.db.View(func(tx *bolt.Tx) error {
		n = len(tx.Bucket(bucketKeys).Get([]byte("k00")))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	old := listBytes
	listBytes = 3 * n
	t.Cleanup(func() { listBytes = old })
	seen := map[string]int{}
	cursor := ""
	pages := 1
	for ; ; pages++ {
		if pages > 20 {
			t.Fatalf("no end after %d pages; seen %v", pages, seen)
		}
		page, next, err := s.List(ctx, 0, cursor, 1000)
		if err != nil {
			t.Fatalf("List after %q: %v", cursor, err)
		}
		kept := 0
		for _, e := range page {
			seen[e.Key]++
			kept += len(e.Record.Sealed.Data)
		}
		if len(page) > 1 && kept > 3000 {
			t.Errorf("a page of %d keys keeps %d sealed bytes, more than three records", len(page), kept)
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	if pages != 5 {
		t.Errorf("the listing took %d pages, want 5: big alone, then the ten others three to a page", pages)
	}
	for k := range sizes {
		if seen[k] != 1 {
			t.Errorf("%s listed %d times, want once", k, seen[k])
		}
	}
	if len(seen) != len(sizes) {
		t.Errorf("listed %v, want the %d keys", seen, len(sizes))
	}
}
