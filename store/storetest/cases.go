package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

func testBeginAcquires(t *testing.T, h *harness) {
	b := h.begin(h.key("k"), fingerprint(1), time.Minute)
	if b.State != store.Acquired || b.Token == "" || b.Record != nil {
		t.Fatalf("Begin = %+v, want acquired with a token and no record", b)
	}
	other := h.acquire(h.key("other"), fingerprint(1), time.Minute)
	if other == b.Token {
		t.Fatalf("two leases share token %q", other)
	}
}

func testBeginSeesInFlight(t *testing.T, h *harness) {
	h.acquire(h.key("k"), fingerprint(1), time.Minute)
	b := h.begin(h.key("k"), fingerprint(2), time.Minute)
	if b.State != store.InFlight || b.Token != "" || b.Fingerprint != fingerprint(1) {
		t.Fatalf("second Begin = %v token %q fp %x, want in_flight, no token, first fp", b.State, b.Token, b.Fingerprint[:4])
	}
}

func testRace(t *testing.T, h *harness) {
	const n = 64
	key := h.key("k")
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make([]store.BeginResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = h.Store.Begin(context.Background(), key, store.Lease{Fingerprint: fingerprint(byte(i))}, time.Minute)
		})
	}
	close(start)
	wg.Wait()
	acquired, winner := 0, store.Fingerprint{}
	for i, b := range results {
		if errs[i] != nil {
			t.Fatalf("Begin #%d: %v", i, errs[i])
		}
		if b.State == store.Acquired {
			acquired++
			winner = fingerprint(byte(i))
		}
	}
	if acquired != 1 {
		t.Fatalf("%d of %d racing Begins acquired, want exactly 1", acquired, n)
	}
	for i, b := range results {
		if b.State == store.InFlight && b.Fingerprint != winner {
			t.Errorf("Begin #%d saw fingerprint %x, want the winner's %x", i, b.Fingerprint[:4], winner[:4])
		}
	}
}

func records() map[string]*store.Record {
	created := time.UnixMilli(1_700_000_000_123).UTC()
	return map[string]*store.Record{
		"binary body": {
			Status: 201,
			Header: map[string][]string{
				"Content-Type": {"application/octet-stream"},
				"X-Repeated":   {"one", "two", "one"},
			},
			Body:        []byte{0, 0xff, 'a', 0, '\n', 0xfe, 0},
			Fingerprint: fingerprint(9), CreatedAt: created,
		},
		// Large enough for a store to treat it apart (the Redis store sends
		// it outside its pipeline).
		"1 MiB body": {
			Status: 200, Header: map[string][]string{"Content-Type": {"application/octet-stream"}},
			Body:        bytes.Repeat([]byte{0, 1, 0xff, 'x'}, 256<<10),
			Fingerprint: fingerprint(9), CreatedAt: created,
		},
		"empty body": {Status: 204, Header: map[string][]string{"X-A": {""}}, Fingerprint: fingerprint(9), CreatedAt: created},
		// A record keeps the request it answered, for the key API.
		"with its request": {
			Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{"id":1}`),
			Fingerprint: fingerprint(9), CreatedAt: created,
			Request: store.Request{Method: "POST", Host: "billing.example", Path: "/v1/charges", Route: "POST /v1/charges", StartedAt: created.Add(-time.Second)},
			Lookup:  store.Lookup{Key: store.LookupKey("order-42"), Scope: [16]byte{1, 15: 0xff}},
		},
		// A gRPC answer: its status is in its trailers, which a replay
		// sends as they came (a version 2 record).
		"with trailers": {
			Status: 200, Header: map[string][]string{"Content-Type": {"application/grpc"}},
			Body:        []byte{0, 0, 0, 0, 2, 0x08, 0x01},
			Trailer:     map[string][]string{"Grpc-Status": {"0"}, "Grpc-Message": {""}, "X-Checksum": {"a", "b"}},
			Fingerprint: fingerprint(9), CreatedAt: created,
		},
		"sealed": sealedRecord(),
		"body omitted": {
			Status: 200, BodyOmitted: true, Header: map[string][]string{"Content-Length": {"5000000"}},
			Fingerprint: fingerprint(9), CreatedAt: created,
		},
	}
}

func testCompleteThenBegin(t *testing.T, h *harness) {
	for name, rec := range records() {
		t.Run(name, func(t *testing.T) {
			key := h.key(name)
			tok := h.acquire(key, rec.Fingerprint, time.Minute)
			h.complete(key, tok, rec, time.Hour)
			b := h.begin(key, fingerprint(3), time.Minute)
			if b.State != store.Completed || b.Record == nil || b.Token != "" {
				t.Fatalf("Begin after Complete = %+v, want completed with record", b)
			}
			if b.Fingerprint != rec.Fingerprint {
				t.Errorf("Begin fingerprint = %x, want the record's %x", b.Fingerprint[:4], rec.Fingerprint[:4])
			}
			assertRecord(t, b.Record, rec)
		})
	}
}

// testCompleteKeepsNothingOfTheRecord: once Complete returned, the record
// is the caller's again — the proxy reuses its header for the next one.
func testCompleteKeepsNothingOfTheRecord(t *testing.T, h *harness) {
	key := h.key("k")
	rec, want := records()["binary body"], records()["binary body"]
	tok := h.acquire(key, rec.Fingerprint, time.Minute)
	h.complete(key, tok, rec, time.Hour)
	for _, vals := range rec.Header {
		for i := range vals {
			vals[i] = "reused"
		}
	}
	rec.Header["X-Next"] = []string{"another response"}
	for i := range rec.Body {
		rec.Body[i] = 'x'
	}
	b := h.begin(key, fingerprint(3), time.Minute)
	if b.State != store.Completed || b.Record == nil {
		t.Fatalf("Begin after Complete = %+v, want completed with record", b)
	}
	assertRecord(t, b.Record, want)
}

func testLeaseExpiry(t *testing.T, h *harness) {
	key, lease := h.key("k"), h.lease()
	old := h.acquire(key, fingerprint(1), lease)
	h.pass(lease + lease/2)
	tok := h.acquireEventually(key, fingerprint(2), time.Minute)
	if tok == old {
		t.Fatalf("new owner got the old token %q", tok)
	}
	ctx := context.Background()
	if err := h.Store.Complete(ctx, key, old, records()["empty body"], time.Hour); !errors.Is(err, store.ErrLockLost) {
		t.Errorf("old owner's Complete = %v, want ErrLockLost", err)
	}
	if err := h.Store.Extend(ctx, key, old, time.Minute); !errors.Is(err, store.ErrLockLost) {
		t.Errorf("old owner's Extend = %v, want ErrLockLost", err)
	}
	if err := h.Store.Release(ctx, key, old); err != nil {
		t.Errorf("old owner's Release = %v, want nil", err)
	}
	if b := h.begin(key, fingerprint(3), time.Minute); b.State != store.InFlight || b.Fingerprint != fingerprint(2) {
		t.Fatalf("after the old owner's attempts Begin = %v fp %x, want in_flight of the new owner", b.State, b.Fingerprint[:4])
	}
	h.complete(key, tok, records()["binary body"], time.Hour)
}

func testReleaseWrongToken(t *testing.T, h *harness) {
	key := h.key("k")
	tok := h.acquire(key, fingerprint(1), time.Minute)
	if err := h.Store.Release(context.Background(), key, tok+"x"); err != nil {
		t.Fatalf("Release with a wrong token = %v, want nil", err)
	}
	if b := h.begin(key, fingerprint(1), time.Minute); b.State != store.InFlight {
		t.Fatalf("Begin after wrong-token Release = %v, want in_flight", b.State)
	}
	rec := records()["empty body"]
	h.complete(key, tok, rec, time.Hour)
	if err := h.Store.Release(context.Background(), key, tok); err != nil {
		t.Fatalf("Release of a completed key = %v, want nil", err)
	}
	if b := h.begin(key, fingerprint(1), time.Minute); b.State != store.Completed {
		t.Fatalf("Release deleted a completed record: Begin = %v", b.State)
	}
}

func testReleaseThenBegin(t *testing.T, h *harness) {
	key := h.key("k")
	tok := h.acquire(key, fingerprint(1), time.Minute)
	if err := h.Store.Release(context.Background(), key, tok); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if again := h.acquire(key, fingerprint(2), time.Minute); again == tok {
		t.Fatalf("token reused after Release: %q", again)
	}
}

func testRecordTTL(t *testing.T, h *harness) {
	key, ttl := h.key("k"), h.lease()
	tok := h.acquire(key, fingerprint(1), time.Minute)
	h.complete(key, tok, records()["binary body"], ttl)
	if b := h.begin(key, fingerprint(1), time.Minute); b.State != store.Completed {
		t.Fatalf("Begin before TTL = %v, want completed", b.State)
	}
	h.pass(ttl + ttl/2)
	h.acquireEventually(key, fingerprint(1), time.Minute)
}

func testExtend(t *testing.T, h *harness) {
	key, lease := h.key("k"), h.lease()
	tok := h.acquire(key, fingerprint(1), lease)
	if err := h.Store.Extend(context.Background(), key, tok, 20*lease); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	h.pass(2 * lease)
	if b := h.begin(key, fingerprint(2), lease); b.State != store.InFlight || b.Fingerprint != fingerprint(1) {
		t.Fatalf("Begin past the original lease = %v, want in_flight of the extended owner", b.State)
	}
	h.complete(key, tok, records()["empty body"], time.Hour)
}

func testCompleteAfterRelease(t *testing.T, h *harness) {
	key := h.key("k")
	tok := h.acquire(key, fingerprint(1), time.Minute)
	if err := h.Store.Release(context.Background(), key, tok); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := h.Store.Complete(context.Background(), key, tok, records()["empty body"], time.Hour); !errors.Is(err, store.ErrLockLost) {
		t.Fatalf("Complete after Release = %v, want ErrLockLost", err)
	}
	if err := h.Store.Extend(context.Background(), key, tok, time.Minute); !errors.Is(err, store.ErrLockLost) {
		t.Fatalf("Extend after Release = %v, want ErrLockLost", err)
	}
	if e, err := h.Store.Inspect(context.Background(), key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Inspect after failed Complete = %+v, %v; want ErrNotFound", e, err)
	}
}

// testManyKeys spreads keys widely: on a Cluster they land on every master.
func testManyKeys(t *testing.T, h *harness) {
	rec := records()["binary body"]
	for i := range 200 {
		key := h.key(fmt.Sprint("key-", i))
		tok := h.acquire(key, rec.Fingerprint, time.Minute)
		h.complete(key, tok, rec, time.Hour)
	}
	for i := range 200 {
		got, err := h.Store.Inspect(context.Background(), h.key(fmt.Sprint("key-", i)))
		if err != nil {
			t.Fatalf("Inspect key-%d: %v", i, err)
		}
		if got.Record == nil || !bytes.Equal(got.Record.Body, rec.Body) {
			t.Fatalf("Inspect key-%d = %+v, want the record", i, got)
		}
	}
}

func testPing(t *testing.T, h *harness) {
	if err := h.Store.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

func assertRecord(t *testing.T, got, want *store.Record) {
	t.Helper()
	if got.Status != want.Status || got.BodyOmitted != want.BodyOmitted || got.Fingerprint != want.Fingerprint {
		t.Errorf("record status/omitted/fp = %d/%v/%x, want %d/%v/%x",
			got.Status, got.BodyOmitted, got.Fingerprint[:4], want.Status, want.BodyOmitted, want.Fingerprint[:4])
	}
	if !bytes.Equal(got.Body, want.Body) {
		t.Errorf("record body = %x, want %x", got.Body, want.Body)
	}
	if !reflect.DeepEqual(got.Header, want.Header) {
		t.Errorf("record header = %q, want %q", got.Header, want.Header)
	}
	if !reflect.DeepEqual(got.Trailer, want.Trailer) {
		t.Errorf("record trailer = %q, want %q", got.Trailer, want.Trailer)
	}
	if !got.CreatedAt.Equal(want.CreatedAt) {
		t.Errorf("record created = %v, want %v", got.CreatedAt, want.CreatedAt)
	}
	if g, w := got.Request, want.Request; g.Method != w.Method || g.Host != w.Host || g.Path != w.Path ||
		g.Route != w.Route || !g.StartedAt.Equal(w.StartedAt) {
		t.Errorf("record request = %+v, want %+v", g, w)
	}
	if got.Lookup != want.Lookup {
		t.Errorf("record lookup = %x, want %x", got.Lookup, want.Lookup)
	}
	assertSealed(t, got.Sealed, want.Sealed)
}
