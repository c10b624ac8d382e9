package seal

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

const marker = "4111-1111-1111-1111-marker"

func newMemory(t *testing.T) *memory.Store {
	t.Helper()
	m := memory.New(memory.Options{})
	t.Cleanup(func() { m.Close() })
	return m
}

func response() *store.Record {
	return &store.Record{
		Status:      201,
		Header:      map[string][]string{"Content-Type": {"application/json"}, "X-Card": {marker}, "Set-Cookie": {"a=1", "b=2"}},
		Body:        []byte(`{"card":"` + marker + `"}`),
		Trailer:     map[string][]string{"Grpc-Status": {"0"}, "X-Card-Trailer": {marker}},
		Fingerprint: store.Fingerprint{7, 31: 9},
		CreatedAt:   time.UnixMilli(1_700_000_000_123).UTC(),
	}
}

// complete takes key in s and completes it with rec.
func complete(t *testing.T, s store.Store, key string, rec *store.Record) {
	t.Helper()
	ctx := context.Background()
	b, err := s.Begin(ctx, key, store.Lease{Fingerprint: rec.Fingerprint}, time.Minute)
	if err != nil || b.State != store.Acquired {
		t.Fatalf("Begin(%s) = %+v, %v; want acquired", key, b, err)
	}
	if err := s.Complete(ctx, key, b.Token, rec, time.Hour); err != nil {
		t.Fatalf("Complete(%s): %v", key, err)
	}
}

func begin(t *testing.T, s store.Store, key string) (store.BeginResult, error) {
	t.Helper()
	return s.Begin(context.Background(), key, store.Lease{Fingerprint: store.Fingerprint{1}}, time.Minute)
}

func assertSameResponse(t *testing.T, got, want *store.Record) {
	t.Helper()
	if got.Status != want.Status || !bytes.Equal(got.Body, want.Body) || !reflect.DeepEqual(got.Header, want.Header) || !reflect.DeepEqual(got.Trailer, want.Trailer) ||
		got.Fingerprint != want.Fingerprint || !got.CreatedAt.Equal(want.CreatedAt) || got.BodyOmitted != want.BodyOmitted || got.Sealed != nil {
		t.Fatalf("opened record %+v, want %+v", got, want)
	}
}

// What the wrapped store holds has the readable fields and no byte of a
// recorded header or body; what the seal layer returns is the response.
func TestStoreHoldsNoHeaderOrBodyInClear(t *testing.T) {
	mem := newMemory(t)
	s := New(mem, mustParse(t, "k1 "+testKey(1)))
	want := response()
	complete(t, s, "key", want)

	held, err := mem.Inspect(context.Background(), "key")
	if err != nil {
		t.Fatal(err)
	}
	rec := held.Record
	if rec.Sealed == nil || rec.Header != nil || rec.Body != nil || rec.Trailer != nil {
		t.Fatalf("held record %+v, want it sealed with no header, body or trailer", rec)
	}
	if bytes.Contains(store.AppendRecord(nil, rec), []byte(marker)) || bytes.Contains(rec.Sealed.Data, []byte("X-Card")) ||
		bytes.Contains(rec.Sealed.Data, []byte("Grpc-Status")) {
		t.Fatal("the store holds the marker or a header name in clear")
	}
	if rec.Status != 201 || held.BodyBytes != len(want.Body) || rec.Sealed.KeyID != "k1" || !rec.CreatedAt.Equal(want.CreatedAt) {
		t.Errorf("held record status %d, body %d bytes, key %q, created %v: want them readable",
			rec.Status, held.BodyBytes, rec.Sealed.KeyID, rec.CreatedAt)
	}

	b, err := begin(t, s, "key")
	if err != nil || b.State != store.Completed {
		t.Fatalf("Begin = %+v, %v; want completed", b, err)
	}
	assertSameResponse(t, b.Record, want)
}

func TestEachRecordHasItsOwnNonce(t *testing.T) {
	mem := newMemory(t)
	s := New(mem, mustParse(t, "k1 "+testKey(1)))
	complete(t, s, "a", response())
	complete(t, s, "b", response())
	a, _ := mem.Inspect(context.Background(), "a")
	b, _ := mem.Inspect(context.Background(), "b")
	if bytes.Equal(a.Record.Sealed.Data[:nonceSize], b.Record.Sealed.Data[:nonceSize]) {
		t.Fatal("two records sealed with one nonce")
	}
}

// copyRecord puts what mem holds under from under to (which may be from),
// changed by change, as someone with write access to the store could.
func copyRecord(t *testing.T, mem *memory.Store, from, to string, change func(*store.Record)) {
	t.Helper()
	e, err := mem.Inspect(context.Background(), from)
	if err != nil {
		t.Fatal(err)
	}
	rec := *e.Record
	sealed := *rec.Sealed
	sealed.Data = bytes.Clone(sealed.Data)
	rec.Sealed = &sealed
	if change != nil {
		change(&rec)
	}
	if to == from {
		if err := mem.Delete(context.Background(), from); err != nil {
			t.Fatal(err)
		}
	}
	complete(t, mem, to, &rec)
}

// A record does not open under another key, nor once any of its bytes —
// sealed or readable — changed.
func TestChangedOrMovedRecordDoesNotOpen(t *testing.T) {
	tests := map[string]func(*store.Record){
		"moved":          nil,
		"ciphertext bit": func(r *store.Record) { r.Sealed.Data[len(r.Sealed.Data)/2] ^= 1 },
		"nonce bit":      func(r *store.Record) { r.Sealed.Data[3] ^= 1 },
		"truncated":      func(r *store.Record) { r.Sealed.Data = r.Sealed.Data[:overhead-1] },
		"status":         func(r *store.Record) { r.Status = 200 },
		"fingerprint":    func(r *store.Record) { r.Fingerprint[0]++ },
		"created":        func(r *store.Record) { r.CreatedAt = r.CreatedAt.Add(time.Millisecond) },
		"body size":      func(r *store.Record) { r.Sealed.BodyBytes++ },
		"body omitted":   func(r *store.Record) { r.BodyOmitted = true },
		"request path":   func(r *store.Record) { r.Request.Path = "/v1/refunds" },
	}
	for name, change := range tests {
		t.Run(name, func(t *testing.T) {
			mem := newMemory(t)
			s := New(mem, mustParse(t, "k1 "+testKey(1)))
			complete(t, s, "original", response())
			// Moved: to another key as it is. Changed: in place, so that
			// only the change can make it fail.
			target := "copy"
			if change != nil {
				target = "original"
			}
			copyRecord(t, mem, "original", target, change)
			_, err := begin(t, s, target)
			var se *store.SealError
			if !errors.Is(err, store.ErrAuthFailed) || !errors.As(err, &se) || se.KeyID != "k1" {
				t.Fatalf("Begin of the %s record = %v, want ErrAuthFailed naming k1", name, err)
			}
			if !errors.Is(err, store.ErrUnreadable) {
				t.Errorf("%v is not ErrUnreadable", err)
			}
		})
	}
}

// Rotation: the first key seals, every listed key opens; a record whose key
// left the file is unreadable, and opens again when the key comes back.
func TestRotationAcrossKeyrings(t *testing.T) {
	mem := newMemory(t)
	s := New(mem, mustParse(t, "old "+testKey(1)))
	want := response()
	complete(t, s, "before", want)

	s.SetKeyring(mustParse(t, "new "+testKey(2), "old "+testKey(1)))
	complete(t, s, "after", want)
	for key, id := range map[string]string{"before": "old", "after": "new"} {
		b, err := begin(t, s, key)
		if err != nil {
			t.Fatalf("Begin(%s) with both keys: %v", key, err)
		}
		assertSameResponse(t, b.Record, want)
		if e, _ := mem.Inspect(context.Background(), key); e.Record.Sealed.KeyID != id {
			t.Errorf("%s sealed with %q, want %q", key, e.Record.Sealed.KeyID, id)
		}
	}

	s.SetKeyring(mustParse(t, "new "+testKey(2)))
	_, err := begin(t, s, "before")
	var se *store.SealError
	if !errors.Is(err, store.ErrKeyUnknown) || !errors.As(err, &se) || se.KeyID != "old" {
		t.Fatalf("Begin(before) without its key = %v, want ErrKeyUnknown naming old", err)
	}
	if _, err := begin(t, s, "after"); err != nil {
		t.Fatalf("Begin(after) = %v", err)
	}

	// A key listed again under another id is another key.
	s.SetKeyring(mustParse(t, "new "+testKey(2), "renamed "+testKey(1)))
	if _, err := begin(t, s, "before"); !errors.Is(err, store.ErrKeyUnknown) {
		t.Fatalf("Begin(before) with its key under another id = %v, want ErrKeyUnknown", err)
	}
	s.SetKeyring(mustParse(t, "new "+testKey(2), "old "+testKey(1)))
	if b, err := begin(t, s, "before"); err != nil {
		t.Fatalf("Begin(before) with its key back = %v", err)
	} else {
		assertSameResponse(t, b.Record, want)
	}
}

// A key listed with other bytes under the same id does not open the
// records of the first.
func TestReplacedKeyDoesNotOpen(t *testing.T) {
	mem := newMemory(t)
	s := New(mem, mustParse(t, "k "+testKey(1)))
	complete(t, s, "key", response())
	s.SetKeyring(mustParse(t, "k "+testKey(2)))
	if _, err := begin(t, s, "key"); !errors.Is(err, store.ErrAuthFailed) {
		t.Fatalf("Begin = %v, want ErrAuthFailed", err)
	}
}

// Encryption off: nothing is sealed, records in clear replay, and a sealed
// record is unreadable rather than an empty response.
func TestWithoutKeyring(t *testing.T) {
	mem := newMemory(t)
	s := New(mem, mustParse(t, "k "+testKey(1)))
	complete(t, s, "sealed", response())
	s.SetKeyring(nil)
	complete(t, s, "clear", response())
	if e, _ := mem.Inspect(context.Background(), "clear"); e.Record.Sealed != nil || !bytes.Contains(e.Record.Body, []byte(marker)) {
		t.Fatalf("record completed without a keyring: %+v, want it in clear", e.Record)
	}
	if _, err := begin(t, s, "sealed"); !errors.Is(err, store.ErrKeyUnknown) {
		t.Fatalf("Begin(sealed) without a keyring = %v, want ErrKeyUnknown", err)
	}
	// Turned on again, the record in clear (from before) still replays.
	s.SetKeyring(mustParse(t, "k "+testKey(1)))
	if b, err := begin(t, s, "clear"); err != nil || !bytes.Contains(b.Record.Body, []byte(marker)) {
		t.Fatalf("Begin(clear) with a keyring = %+v, %v; want the record in clear", b, err)
	}
}

func TestBodyOmittedAndEmptyRecords(t *testing.T) {
	s := New(newMemory(t), mustParse(t, "k "+testKey(1)))
	for name, rec := range map[string]*store.Record{
		"omitted":  {Status: 200, BodyOmitted: true, Header: map[string][]string{"Content-Length": {"0"}}},
		"empty":    {Status: 204},
		"1 MiB":    {Status: 200, Body: bytes.Repeat([]byte{0, 'x'}, 512<<10), Header: map[string][]string{"A": {"b"}}},
		"no clock": {Status: 500, Header: map[string][]string{}},
	} {
		t.Run(name, func(t *testing.T) {
			complete(t, s, name, rec)
			b, err := begin(t, s, name)
			if err != nil {
				t.Fatal(err)
			}
			if b.Record.Status != rec.Status || b.Record.BodyOmitted != rec.BodyOmitted || !bytes.Equal(b.Record.Body, rec.Body) || len(b.Record.Header) != len(rec.Header) {
				t.Fatalf("opened %+v, want %+v", b.Record, rec)
			}
		})
	}
}

// flakyComplete stores the record but reports the store unavailable, as a
// completion whose reply was lost.
type flakyComplete struct {
	store.Store
	lose atomic.Int32
}

func (f *flakyComplete) Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	err := f.Store.Complete(ctx, key, token, rec, ttl)
	if err == nil && f.lose.Add(-1) >= 0 {
		return store.ErrUnavailable
	}
	return err
}

// A completion retried after its reply was lost stores the same sealed
// bytes, so the store recognises its own success instead of reporting a
// lost lease.
func TestRetriedCompletionIsNotALostLease(t *testing.T) {
	inner := &flakyComplete{Store: newMemory(t)}
	inner.lose.Store(2)
	s := New(inner, mustParse(t, "k "+testKey(1)))
	ctx := context.Background()
	rec := response()
	b, err := s.Begin(ctx, "key", store.Lease{Fingerprint: rec.Fingerprint}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := s.Complete(ctx, "key", b.Token, rec, time.Hour); !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("Complete #%d = %v, want the lost reply", i+1, err)
		}
	}
	// The retry brings an equal record, not the same value: a caller that
	// rebuilt it is still recognised, and nothing of the first is kept.
	again := *rec
	if err := s.Complete(ctx, "key", b.Token, &again, time.Hour); err != nil {
		t.Fatalf("retried Complete = %v, want nil", err)
	}
	if len(s.pending) != 0 {
		t.Errorf("%d sealings kept after the completion succeeded", len(s.pending))
	}
	// Another record with that token is still refused.
	if err := s.Complete(ctx, "key", b.Token, response(), time.Hour); !errors.Is(err, store.ErrLockLost) {
		t.Fatalf("Complete of another record = %v, want ErrLockLost", err)
	}
}

// The operator's view: an opened record with the key that sealed it; an
// unreadable one with its readable fields and the reason.
func TestInspectAndListOpenRecords(t *testing.T) {
	mem := newMemory(t)
	s := New(mem, mustParse(t, "k1 "+testKey(1)))
	want := response()
	complete(t, s, "key", want)
	ctx := context.Background()

	e, err := s.Inspect(ctx, "key")
	if err != nil || e.SealedBy != "k1" || e.Unreadable != nil || e.BodyBytes != len(want.Body) {
		t.Fatalf("Inspect = %+v, %v; want the record opened, sealed by k1", e, err)
	}
	assertSameResponse(t, e.Record, want)
	list, _, err := s.List(ctx, store.Completed, "", 10)
	if err != nil || len(list) != 1 || list[0].Record.Header["X-Card"][0] != marker || list[0].Record.Body != nil || list[0].BodyBytes != len(want.Body) {
		t.Fatalf("List = %+v, %v; want the record's headers and size, no body", list, err)
	}

	s.SetKeyring(mustParse(t, "k2 "+testKey(2)))
	e, err = s.Inspect(ctx, "key")
	if err != nil || !errors.Is(e.Unreadable, store.ErrKeyUnknown) || e.SealedBy != "k1" || e.Record.Status != 201 || e.BodyBytes != len(want.Body) || e.Record.Header != nil {
		t.Fatalf("Inspect without the key = %+v, %v; want status and size, unreadable", e, err)
	}
	if !strings.Contains(e.Unreadable.Error(), `"k1"`) {
		t.Errorf("unreadable %q does not name the key id", e.Unreadable)
	}
}

// A lease's description is not sealed (it holds no response) and passes
// through the seal layer both ways: a key in flight says who holds it.
func TestLeaseDescriptionPassesThrough(t *testing.T) {
	s := New(newMemory(t), mustParse(t, "k1 "+testKey(1)))
	ctx := context.Background()
	l := store.Lease{
		Fingerprint: store.Fingerprint{3},
		Request:     store.Request{Method: "POST", Host: "h", Path: "/p", Route: "POST /p", StartedAt: time.UnixMilli(1_700_000_000_001).UTC()},
		Instance:    "proxy/1", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736",
	}
	if b, err := s.Begin(ctx, "k", l, time.Minute); err != nil || b.State != store.Acquired {
		t.Fatalf("Begin = %+v, %v; want acquired", b, err)
	}
	if b, err := s.Begin(ctx, "k", store.Lease{Fingerprint: l.Fingerprint}, time.Minute); err != nil || b.Lease != l {
		t.Fatalf("second Begin = %+v, %v; want in flight with %+v", b, err, l)
	}
	if e, err := s.Inspect(ctx, "k"); err != nil || e.Lease != l {
		t.Fatalf("Inspect = %+v, %v; want the lease %+v", e, err, l)
	}
}
