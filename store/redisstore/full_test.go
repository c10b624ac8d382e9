package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// TestFullRedisKeepsLease fills a noeviction Redis to its maxmemory with
// other data, then checks what the store does for a request in flight: its
// completion is refused with ErrFull (the OOM cause in the message), the
// lease stays and can be extended, Begin still reports the key, Health says
// full, and once room returns a completion succeeds. It holds with Begin
// looking for tombstones (one script) as with its SET.
func TestFullRedisKeepsLease(t *testing.T) {
	for _, tombs := range []bool{false, true} {
		t.Run(fmt.Sprint("tombstones=", tombs), func(t *testing.T) { testFullRedisKeepsLease(t, tombs) })
	}
}

func testFullRedisKeepsLease(t *testing.T, tombs bool) {
	srv := redistest.Start(t, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
	s := newStore(t, Options{URL: srv.URL(), Timeout: time.Second})
	s.CheckTombstones(tombs)
	admin := srv.Client(t)
	ctx := context.Background()
	fp := store.Fingerprint{5}
	b, err := s.Begin(ctx, "k", store.Lease{Fingerprint: fp}, time.Minute)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	filler := strings.Repeat("x", 16<<10)
	for i := 0; ; i++ {
		if i == 1000 {
			t.Fatal("Redis took 16 MB under a 2 MB maxmemory")
		}
		if err := admin.Set(ctx, fmt.Sprint("filler:", i), filler, 0).Err(); err != nil {
			if !strings.HasPrefix(err.Error(), "OOM") {
				t.Fatalf("filling Redis: %v", err)
			}
			break
		}
	}

	rec := &store.Record{Status: 200, Body: []byte(filler), Fingerprint: fp}
	err = s.Complete(ctx, "k", b.Token, rec, time.Hour)
	if !errors.Is(err, store.ErrFull) || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("Complete on a full Redis = %v, want ErrFull naming the OOM", err)
	}
	if err := s.Extend(ctx, "k", b.Token, 2*time.Minute); err != nil {
		t.Fatalf("Extend on a full Redis: %v", err)
	}
	if ttl := admin.PTTL(ctx, "idem:{k}").Val(); ttl <= time.Minute {
		t.Fatalf("lease TTL after Extend = %v, want over 1m", ttl)
	}
	if got, err := s.Begin(ctx, "k", store.Lease{Fingerprint: store.Fingerprint{6}}, time.Minute); err != nil || got.State != store.InFlight || got.Fingerprint != fp {
		t.Fatalf("Begin on the leased key of a full Redis = %+v, %v; want in_flight", got, err)
	}
	if _, err := s.Begin(ctx, "new", store.Lease{Fingerprint: fp}, time.Minute); !errors.Is(err, store.ErrFull) {
		t.Fatalf("Begin on a new key of a full Redis = %v, want ErrFull", err)
	}
	if h, err := s.Health(ctx); err != nil || !h.Full || h.EvictionUnsafe {
		t.Fatalf("Health of a full noeviction Redis = %+v, %v; want full, eviction-safe", h, err)
	}

	// Room returns: a record without its body is stored.
	for i := range 16 {
		if err := admin.Del(ctx, fmt.Sprint("filler:", i)).Err(); err != nil {
			t.Fatalf("DEL: %v", err)
		}
	}
	small := &store.Record{Status: 200, BodyOmitted: true, Fingerprint: fp}
	if err := s.Complete(ctx, "k", b.Token, small, time.Hour); err != nil {
		t.Fatalf("Complete of a smaller record after room returned: %v", err)
	}
	if e, err := s.Inspect(ctx, "k"); err != nil || e.State != store.Completed || !e.Record.BodyOmitted {
		t.Fatalf("Inspect = %+v, %v; want the bodiless record", e, err)
	}
}
