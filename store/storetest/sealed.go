package storetest

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// sealedRecord is a record as package store/seal hands it to a store: its
// header and body only in Sealed.
func sealedRecord() *store.Record {
	return &store.Record{
		Status: 201, Fingerprint: fingerprint(9), CreatedAt: time.UnixMilli(1_700_000_000_123).UTC(),
		Sealed: &store.Sealed{KeyID: "2026-01", BodyBytes: 4096, Data: bytes.Repeat([]byte{0, 0xff, 'n'}, 300)},
	}
}

// testSealedRecordIsKeptWhole checks that a store returns a sealed record as
// it was given, to Begin, Inspect and List alike: a listing keeps Sealed
// (without it the seal layer could not show a listed record's headers), and
// the body size operators see is the one in clear.
func testSealedRecordIsKeptWhole(t *testing.T, h *harness) {
	rec := sealedRecord()
	key := h.key("sealed")
	tok := h.acquire(key, rec.Fingerprint, time.Minute)
	h.complete(key, tok, rec, time.Hour)

	b := h.begin(key, rec.Fingerprint, time.Minute)
	if b.State != store.Completed || b.Record == nil {
		t.Fatalf("Begin after Complete = %+v, want completed", b)
	}
	assertRecord(t, b.Record, rec)

	e, err := h.Store.Inspect(context.Background(), key)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	if e.State != store.Completed || e.BodyBytes != rec.Sealed.BodyBytes || e.Record == nil {
		t.Fatalf("Inspect = %+v, want completed with body size %d", e, rec.Sealed.BodyBytes)
	}
	assertRecord(t, e.Record, rec)

	listed, ok := h.listAll(store.Completed, 100)[key]
	if !ok || listed.Record == nil || listed.BodyBytes != rec.Sealed.BodyBytes {
		t.Fatalf("List gave %+v, want the record with body size %d", listed, rec.Sealed.BodyBytes)
	}
	assertSealed(t, listed.Record.Sealed, rec.Sealed)
}

func assertSealed(t *testing.T, got, want *store.Sealed) {
	t.Helper()
	switch {
	case got == nil && want == nil:
	case got == nil || want == nil:
		t.Errorf("record sealed = %+v, want %+v", got, want)
	case got.KeyID != want.KeyID || got.BodyBytes != want.BodyBytes || !bytes.Equal(got.Data, want.Data):
		t.Errorf("record sealed by %q, %d bytes in clear, data %x; want %q, %d, %x",
			got.KeyID, got.BodyBytes, got.Data, want.KeyID, want.BodyBytes, want.Data)
	}
}
