package postgres

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/storetest"
)

// TestPageOfLargeRecordsReadsABoundedAmount: a sealed record's head holds
// its sealed header and body, so a page of a listing reads at most
// listBytes of heads, as many as fit exactly, ending early with a cursor, however high its limit;
// a head larger than that alone is still listed, on a page of its own;
// and paging on lists every key once, leases among them.
func TestPageOfLargeRecordsReadsABoundedAmount(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	s := newStore(t, srv, Options{Table: "listbytes", SweepInterval: -1})
	sizes := map[string]int{"big": 5000, "lease": 0}
	for i := range 10 {
		sizes[fmt.Sprintf("k%02d", i)] = 1000
	}
	for k, n := range sizes {
		b, err := s.Begin(ctx, k, store.Lease{}, time.Minute)
		if err != nil || b.State != store.Acquired {
			t.Fatalf("Begin %s = %v, %v", k, b.State, err)
		}
		if n == 0 {
			continue
		}
		rec := &store.Record{Status: 201, Sealed: &store.Sealed{KeyID: "k1", BodyBytes: n, Data: bytes.Repeat([]byte("x"), n)}}
		if err := s.Complete(ctx, k, b.Token, rec, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	// Exactly three of the 1,000-byte records fit in a page.
	var n int
	if err := srv.Conn(t).QueryRow(ctx, `SELECT octet_length(head) FROM listbytes WHERE key = 'k00'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	old := listBytes
	listBytes = 3 * n
	t.Cleanup(func() { listBytes = old })
	// Big alone, then the ten others three to a page, the lease with the last.
	storetest.PagesOfBoundedSize(t, s, func(e store.Entry) int {
		if e.Record == nil {
			return 0
		}
		return len(e.Record.Sealed.Data)
	}, 3000, 5, sizes)
}
