package filestore

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/storetest"
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
	// Big alone, then the ten others three to a page.
	storetest.PagesOfBoundedSize(t, s, func(e store.Entry) int { return len(e.Record.Sealed.Data) }, 3000, 5, sizes)
}
