package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// describedLease is a lease with every field of its description set.
func describedLease(fp store.Fingerprint, path string) store.Lease {
	return store.Lease{
		Fingerprint: fp,
		Request: store.Request{
			Method: "POST", Host: "billing.example", Path: path, Route: "POST /v1/charges",
			StartedAt: time.UnixMilli(1_764_590_400_123).UTC(),
		},
		Instance: "proxy-7f9c/4121",
		TraceID:  "4bf92f3577b34da6a3ce929d0e0e4736",
	}
}

// testLeaseDescriptionRoundTrips: the description a Begin stores with its
// lease is what a second Begin, Inspect and List report of the key, and
// it survives a renewal; a lease that describes nothing reads as one with
// its fingerprint only; a lease taken over after expiry is described by
// its new holder.
func testLeaseDescriptionRoundTrips(t *testing.T, h *harness) {
	ctx := context.Background()
	key := h.key("k")
	want := describedLease(fingerprint(5), "/v1/charges")
	b, err := h.Store.Begin(ctx, key, want, time.Minute)
	if err != nil || b.State != store.Acquired {
		t.Fatalf("Begin = %v, %v; want acquired", b.State, err)
	}
	if err := h.Store.Extend(ctx, key, b.Token, 2*time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	other, err := h.Store.Begin(ctx, key, describedLease(fingerprint(6), "/other"), time.Minute)
	if err != nil || other.State != store.InFlight {
		t.Fatalf("second Begin = %v, %v; want in flight", other.State, err)
	}
	if other.Lease != want {
		t.Errorf("second Begin's lease = %+v, want the holder's %+v", other.Lease, want)
	}
	e, err := h.Store.Inspect(ctx, key)
	if err != nil || e.Lease != want {
		t.Errorf("Inspect's lease = %+v, %v; want %+v", e.Lease, err, want)
	}
	entries, _, err := h.Store.List(ctx, store.InFlight, "", 1000)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	listed := false
	for _, e := range entries {
		if e.Key == key {
			listed = true
			if e.Lease != want {
				t.Errorf("listed lease = %+v, want %+v", e.Lease, want)
			}
		}
	}
	if !listed {
		t.Errorf("List of in-flight keys does not hold %q", key)
	}

	bare := h.key("bare")
	h.acquire(bare, fingerprint(7), time.Minute)
	if e, err := h.Store.Inspect(ctx, bare); err != nil || e.Lease != (store.Lease{Fingerprint: fingerprint(7)}) {
		t.Errorf("Inspect of a lease that describes nothing = %+v, %v; want its fingerprint only", e.Lease, err)
	}
	if b := h.begin(bare, fingerprint(7), time.Minute); b.State != store.InFlight || b.Lease != (store.Lease{Fingerprint: fingerprint(7)}) {
		t.Errorf("Begin on a lease that describes nothing = %v %+v; want in flight with its fingerprint only", b.State, b.Lease)
	}

	taken := h.key("taken")
	if _, err := h.Store.Begin(ctx, taken, describedLease(fingerprint(8), "/first"), h.lease()); err != nil {
		t.Fatalf("Begin: %v", err)
	}
	h.pass(h.lease() + 50*time.Millisecond)
	next := describedLease(fingerprint(9), "/second")
	next.TraceID = ""
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := h.Store.Begin(ctx, taken, next, time.Minute)
		if err != nil {
			t.Fatalf("Begin after expiry: %v", err)
		}
		if b.State == store.Acquired {
			break
		}
		if h.Advance != nil || time.Now().After(deadline) {
			t.Fatalf("Begin after expiry = %v, want acquired", b.State)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if e, err := h.Store.Inspect(ctx, taken); err != nil || e.Lease != next {
		t.Errorf("Inspect after takeover = %+v, %v; want the new holder's %+v", e.Lease, err, next)
	}

	// Through the tombstone layer, as the proxy runs the store.
	ts := store.WithTombstones(nopCloser{h.Store}, nil)
	ts.Check(true)
	wrapped := h.key("wrapped")
	if b, err := ts.Begin(ctx, wrapped, want, time.Minute); err != nil || b.State != store.Acquired {
		t.Fatalf("Begin through tombstones = %v, %v; want acquired", b.State, err)
	}
	if b, err := ts.Begin(ctx, wrapped, describedLease(fingerprint(6), "/other"), time.Minute); err != nil || b.Lease != want {
		t.Errorf("second Begin through tombstones = %v %+v, %v; want in flight with %+v", b.State, b.Lease, err, want)
	}
}
