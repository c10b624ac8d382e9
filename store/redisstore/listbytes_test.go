package redisstore

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/storetest"
)

// TestPageOfLargeRecordsReadsABoundedAmount: a page of a listing reads at
// most listBytes of values, as many as fit exactly, ending early with a
// cursor, however high its limit; a value larger than that alone is still listed, on a page of its
// own; and paging on lists every key once.
func TestPageOfLargeRecordsReadsABoundedAmount(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	s := newStore(t, Options{URL: "redis://" + m.Addr()})
	bodies := map[string]int{"big": 5000}
	for i := range 10 {
		bodies[fmt.Sprintf("k%02d", i)] = 1000
	}
	for k, n := range bodies {
		b, err := s.Begin(ctx, k, store.Lease{}, time.Minute)
		if err != nil || b.State != store.Acquired {
			t.Fatalf("Begin %s = %v, %v", k, b.State, err)
		}
		if err := s.Complete(ctx, k, b.Token, &store.Record{Status: 201, Body: bytes.Repeat([]byte("x"), n)}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	// Exactly three of the 1,000-byte records fit in a page.
	v, err := m.Get(s.redisKey("k00"))
	if err != nil {
		t.Fatal(err)
	}
	old := listBytes
	listBytes = 3 * len(v)
	t.Cleanup(func() { listBytes = old })
	// Big alone, then the ten others three to a page.
	storetest.PagesOfBoundedSize(t, s, func(e store.Entry) int { return e.BodyBytes }, listBytes, 5, bodies)
}
