package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// stepClock is a clock that moves only when the test moves it, shared by
// a store and the tombstones kept over it.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// A key whose record expired is refused for expired_key_window counted
// from the record's expiry, not from its completion: refused just inside
// the window's end, new just outside it. Every refusal says the key
// expired when its record did, not when the retry came.
func TestExpiredKeyIsRefusedUntilItsWindowEnds(t *testing.T) {
	const ttl, window = 10 * time.Second, 20 * time.Second
	completed := time.Unix(1_700_000_000, 0)
	expiry := completed.Add(ttl)
	for name, probe := range map[string]struct {
		at   time.Time
		want store.State
	}{
		"just before the record expires": {at: expiry.Add(-time.Millisecond), want: store.Completed},
		"just after the record expired":  {at: expiry.Add(time.Millisecond), want: store.Expired},
		"half way through the window":    {at: expiry.Add(window / 2), want: store.Expired},
		"just inside the window's end":   {at: expiry.Add(window - time.Millisecond), want: store.Expired},
		"just outside the window's end":  {at: expiry.Add(window + time.Millisecond), want: store.Acquired},
	} {
		t.Run(name, func(t *testing.T) {
			clock := &stepClock{now: completed}
			mem := memory.New(memory.Options{Now: clock.Now, SweepInterval: -1})
			t.Cleanup(func() { mem.Close() })
			ts := store.WithTombstones(mem, clock.Now)
			ts.Check(true)
			ctx := context.Background()
			fp := store.Fingerprint{3, 31: 7}
			b, err := ts.Begin(ctx, "k", store.Lease{Fingerprint: fp}, time.Minute)
			if err != nil || b.State != store.Acquired {
				t.Fatalf("Begin = %v, %v; want acquired", b.State, err)
			}
			rec := &store.Record{Status: 201, Fingerprint: fp, CreatedAt: completed, Tombstone: window}
			if err := ts.Complete(ctx, "k", b.Token, rec, ttl); err != nil {
				t.Fatalf("Complete: %v", err)
			}

			clock.set(probe.at)
			got, err := ts.Begin(ctx, "k", store.Lease{Fingerprint: fp}, time.Minute)
			if err != nil {
				t.Fatalf("Begin %v after the record's expiry: %v", probe.at.Sub(expiry), err)
			}
			if got.State != probe.want {
				t.Fatalf("Begin %v after the record's expiry (ttl %v, window %v) = %v, want %v", probe.at.Sub(expiry), ttl, window, got.State, probe.want)
			}
			if got.State == store.Expired && (got.Fingerprint != fp || !got.ExpiredAt.Equal(expiry)) {
				t.Errorf("refusal at %v says fingerprint %x expired at %v, want %x at %v, when the record expired", probe.at, got.Fingerprint[:4], got.ExpiredAt, fp[:4], expiry)
			}
		})
	}
}

// A record completed without a tombstone (expired_keys: forget) leaves
// none: the completion costs no operation more and the key is new once its
// record expires.
func TestCompletionWithoutTombstoneLeavesNone(t *testing.T) {
	clock := &stepClock{now: time.Unix(1_700_000_000, 0)}
	mem := memory.New(memory.Options{Now: clock.Now, SweepInterval: -1})
	t.Cleanup(func() { mem.Close() })
	ts := store.WithTombstones(mem, clock.Now)
	ts.Check(true)
	ctx := context.Background()
	b, err := ts.Begin(ctx, "k", store.Lease{}, time.Minute)
	if err != nil || b.State != store.Acquired {
		t.Fatalf("Begin = %v, %v; want acquired", b.State, err)
	}
	if err := ts.Complete(ctx, "k", b.Token, &store.Record{Status: 201}, 10*time.Second); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if e, err := mem.Inspect(ctx, "k"+store.TombstoneSuffix); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Inspect of the tombstone's key = %+v, %v; want none written", e, err)
	}
}
