package redisstore

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/idempotency-proxy/idempotency-proxy/store"
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
		read := 0
		for _, e := range page {
			seen[e.Key]++
			read += e.BodyBytes
		}
		if len(page) > 1 && read > listBytes {
			t.Errorf("a page of %d keys read %d bytes of bodies, more than listBytes %d", len(page), read, listBytes)
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	if pages != 5 {
		t.Errorf("the listing took %d pages, want 5: big alone, then the ten others three to a page", pages)
	}
	for k := range bodies {
		if seen[k] != 1 {
			t.Errorf("%s listed %d times, want once", k, seen[k])
		}
	}
	if len(seen) != len(bodies) {
		t.Errorf("listed %v, want the %d keys", seen, len(bodies))
	}
}
