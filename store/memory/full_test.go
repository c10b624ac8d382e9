package memory

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

func TestFullRefusesNewKeysOnly(t *testing.T) {
	s, _ := newTestStore(t, Options{MaxBytes: 3 * (entryOverhead + 2), SweepInterval: -1})
	ctx := context.Background()
	for i := range 3 {
		if _, err := s.Begin(ctx, fmt.Sprint("k", i), store.Lease{Fingerprint: store.Fingerprint{1}}, time.Minute); err != nil {
			t.Fatalf("Begin k%d: %v", i, err)
		}
	}
	_, err := s.Begin(ctx, "k3", store.Lease{}, time.Minute)
	if !errors.Is(err, store.ErrFull) || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Begin on a new key when full = %v, want ErrFull (and ErrUnavailable)", err)
	}
	b, err := s.Begin(ctx, "k0", store.Lease{}, time.Minute)
	if err != nil || b.State != store.InFlight || b.Fingerprint != (store.Fingerprint{1}) {
		t.Fatalf("Begin on an existing key when full = %+v, %v; want in_flight", b, err)
	}
}

// TestFullCompleteKeepsLease: a record that does not fit is refused with
// ErrFull, the lease stays (Extend works, others see it in flight), and a
// smaller record then fits.
func TestFullCompleteKeepsLease(t *testing.T) {
	rec := &store.Record{Status: 200, Header: map[string][]string{"A": {"b"}}, Body: make([]byte, 4096)}
	s, _ := newTestStore(t, Options{MaxBytes: 1024, SweepInterval: -1})
	ctx := context.Background()
	b, err := s.Begin(ctx, "k", store.Lease{Fingerprint: store.Fingerprint{1}}, time.Minute)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	if err := s.Complete(ctx, "k", b.Token, rec, time.Hour); !errors.Is(err, store.ErrFull) {
		t.Fatalf("Complete of a record over the bound = %v, want ErrFull", err)
	}
	if err := s.Extend(ctx, "k", b.Token, time.Minute); err != nil {
		t.Fatalf("Extend after a refused Complete: %v", err)
	}
	if got, _ := s.Begin(ctx, "k", store.Lease{Fingerprint: store.Fingerprint{2}}, time.Minute); got.State != store.InFlight {
		t.Fatalf("Begin after a refused Complete = %v, want in_flight", got.State)
	}
	small := &store.Record{Status: 200, Header: rec.Header, BodyOmitted: true}
	if err := s.Complete(ctx, "k", b.Token, small, time.Hour); err != nil {
		t.Fatalf("Complete of the record without its body: %v", err)
	}
	e, err := s.Inspect(ctx, "k")
	if err != nil || !e.Record.BodyOmitted || e.Record.Status != 200 {
		t.Fatalf("Inspect = %+v, %v; want the bodiless record", e, err)
	}
	if used := s.UsedBytes(); used > 1024 {
		t.Fatalf("UsedBytes = %d, want <= 1024", used)
	}
}

func TestFullReclaimsExpiredBeforeRefusing(t *testing.T) {
	s, c := newTestStore(t, Options{MaxBytes: entryOverhead + 1, SweepInterval: -1})
	ctx := context.Background()
	if _, err := s.Begin(ctx, "a", store.Lease{}, time.Second); err != nil {
		t.Fatalf("Begin a: %v", err)
	}
	c.Advance(2 * time.Second)
	// "b" may hash to another shard than "a": the store must still find room
	// once the sweeper has passed.
	for i := range shardCount {
		s.sweepShard(i)
	}
	if got := s.UsedBytes(); got != 0 {
		t.Fatalf("UsedBytes after sweeping expired entries = %d, want 0", got)
	}
	if _, err := s.Begin(ctx, "b", store.Lease{}, time.Second); err != nil {
		t.Fatalf("Begin b after expiry: %v", err)
	}
}

func TestSweeperReclaims(t *testing.T) {
	s, c := newTestStore(t, Options{SweepInterval: time.Millisecond})
	ctx := context.Background()
	for i := range 100 {
		if _, err := s.Begin(ctx, fmt.Sprint("k", i), store.Lease{}, time.Second); err != nil {
			t.Fatalf("Begin: %v", err)
		}
	}
	c.Advance(2 * time.Second)
	wait.SucceedsSoon(t, 5*time.Second, func() error {
		if n := s.UsedBytes(); n != 0 {
			return fmt.Errorf("UsedBytes = %d after expiry, want 0", n)
		}
		return nil
	})
}

func TestUsedBytesAccounting(t *testing.T) {
	s, _ := newTestStore(t, Options{SweepInterval: -1})
	ctx := context.Background()
	b, _ := s.Begin(ctx, "k", store.Lease{}, time.Minute)
	if got, want := s.UsedBytes(), int64(len("k")+entryOverhead); got != want {
		t.Fatalf("UsedBytes with a lease = %d, want %d", got, want)
	}
	rec := &store.Record{Status: 200, Body: []byte("hello")}
	if err := s.Complete(ctx, "k", b.Token, rec, time.Minute); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if got, want := s.UsedBytes(), recordSize("k", rec); got != want {
		t.Fatalf("UsedBytes with a record = %d, want %d", got, want)
	}
	b2, _ := s.Begin(ctx, "k2", store.Lease{}, time.Minute)
	if err := s.Release(ctx, "k2", b2.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if got, want := s.UsedBytes(), recordSize("k", rec); got != want {
		t.Fatalf("UsedBytes after Release = %d, want %d", got, want)
	}
}

func TestCloseIdempotent(t *testing.T) {
	for _, interval := range []time.Duration{0, -1} {
		s := New(Options{SweepInterval: interval})
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	}
}

// TestUsedBytesCountsALeasesDescription: a lease's bytes are its key, its
// description (the request, instance and trace that hold it) and the
// entry's overhead, as max_bytes counts them.
func TestUsedBytesCountsALeasesDescription(t *testing.T) {
	s, _ := newTestStore(t, Options{SweepInterval: -1})
	l := store.Lease{Request: store.Request{Method: "POST", Host: "api.example", Path: "/v1/charges"}, Instance: "proxy-1"}
	if _, err := s.Begin(context.Background(), "k", l, time.Minute); err != nil {
		t.Fatalf("Begin: %v", err)
	}
	if got, want := s.UsedBytes(), int64(len("k")+store.EncodedLeaseSize(&l))+entryOverhead; got != want {
		t.Fatalf("UsedBytes with a described lease = %d, want %d", got, want)
	}
}

// TestALeaseAndARecordLapseAtTheirTTL: an entry lives until its TTL has
// passed and not an instant more: at exactly lock_ttl the key is free to
// take again, and at exactly the record's TTL it is gone.
func TestALeaseAndARecordLapseAtTheirTTL(t *testing.T) {
	s, c := newTestStore(t, Options{SweepInterval: -1})
	ctx := context.Background()
	if _, err := s.Begin(ctx, "k", store.Lease{}, time.Minute); err != nil {
		t.Fatalf("Begin: %v", err)
	}
	c.Advance(time.Minute - time.Nanosecond)
	if b, err := s.Begin(ctx, "k", store.Lease{}, time.Minute); err != nil || b.State != store.InFlight {
		t.Fatalf("Begin just before the lease's end = %v, %v; want in flight", b.State, err)
	}
	c.Advance(time.Nanosecond)
	b, err := s.Begin(ctx, "k", store.Lease{}, time.Minute)
	if err != nil || b.State != store.Acquired {
		t.Fatalf("Begin at exactly the lease's end = %v, %v; want acquired", b.State, err)
	}
	if err := s.Complete(ctx, "k", b.Token, &store.Record{Status: 201}, time.Hour); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	c.Advance(time.Hour)
	if b, err := s.Begin(ctx, "k", store.Lease{}, time.Minute); err != nil || b.State != store.Acquired {
		t.Fatalf("Begin at exactly the record's end = %v, %v; want acquired", b.State, err)
	}
}

// TestHealthIsFullOnlyWhenANewKeyCannotGetRoom: a store at max_bytes
// reports Full under reject, and under evict_oldest only when it holds no
// record to evict.
func TestHealthIsFullOnlyWhenANewKeyCannotGetRoom(t *testing.T) {
	rec := &store.Record{Status: 200, Body: make([]byte, 300)}
	for _, tt := range []struct {
		name     string
		whenFull store.WhenFull
		complete bool
		want     bool
	}{
		{"reject, records", store.Reject, true, true},
		{"evict_oldest, records", store.EvictOldest, true, false},
		{"evict_oldest, leases only", store.EvictOldest, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := store.Lease{Instance: "proxy-1"}
			max := 2 * (int64(len("k0")+store.EncodedLeaseSize(&l)) + entryOverhead)
			if tt.complete {
				max = 2 * recordSize("k0", rec)
			}
			s, _ := newTestStore(t, Options{MaxBytes: max, WhenFull: tt.whenFull, SweepInterval: -1})
			ctx := context.Background()
			for i := range 2 {
				key := fmt.Sprintf("k%d", i)
				b, err := s.Begin(ctx, key, l, time.Hour)
				if err != nil {
					t.Fatalf("Begin %s: %v", key, err)
				}
				if tt.complete {
					if err := s.Complete(ctx, key, b.Token, rec, time.Hour); err != nil {
						t.Fatalf("Complete %s: %v", key, err)
					}
				}
			}
			h, err := s.Health(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if h.Full != tt.want {
				t.Errorf("Health().Full = %v with %d of %d bytes used, want %v", h.Full, s.UsedBytes(), max, tt.want)
			}
		})
	}
}

// TestSweeperReclaimsAnEntryAtItsExpiry: the sweeper frees an entry's
// bytes from the instant it expires, as a lookup counts it gone.
func TestSweeperReclaimsAnEntryAtItsExpiry(t *testing.T) {
	s, c := newTestStore(t, Options{SweepInterval: -1})
	if _, err := s.Begin(context.Background(), "k", store.Lease{}, time.Second); err != nil {
		t.Fatalf("Begin: %v", err)
	}
	c.Advance(time.Second)
	for i := range shardCount {
		s.sweepShard(i)
	}
	if n := s.UsedBytes(); n != 0 {
		t.Fatalf("UsedBytes = %d after a sweep at the lease's expiry, want 0", n)
	}
}
