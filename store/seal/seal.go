// Package seal encrypts recorded responses at rest. Its Store wraps any
// store: the records it hands on have their header and body sealed
// (store.Record.Sealed), and the records it returns are opened again, so
// no store — memory, Redis, Postgres, files — ever holds a recorded header
// or body in clear, whatever its own encoding.
//
// A record is sealed with XAES-256-GCM (AES-256-GCM under a key derived per
// record, xaes.go) with a fresh random nonce. Its associated data binds it
// to its storage key and to everything of it that stays readable (status,
// fingerprint, creation time, sizes, the key id): a record copied to
// another key, or with its status changed, does not open.
package seal

import (
	"encoding/binary"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// adPrefix starts the associated data, naming what is sealed and how: a
// later layout gets a new prefix.
const adPrefix = "idempotency-proxy sealed record 1\x00"

// seal returns rec sealed with the keyring's first key for the storage key:
// the readable fields of rec and its header and body in Sealed.
func (kr *Keyring) seal(storageKey string, rec *store.Record) *store.Record {
	k := kr.keys[0]
	inner := store.Record{Header: rec.Header, Body: rec.Body, Trailer: rec.Trailer, BodyOmitted: rec.BodyOmitted}
	size := 0
	if !rec.BodyOmitted {
		size = len(rec.Body)
	}
	out := &store.Record{
		Status: rec.Status, Fingerprint: rec.Fingerprint, CreatedAt: rec.CreatedAt, BodyOmitted: rec.BodyOmitted,
		Request: rec.Request, Lookup: rec.Lookup, Sealed: &store.Sealed{KeyID: k.id, BodyBytes: size},
	}
	n := store.EncodedSize(&inner)
	data := make([]byte, nonceSize, nonceSize+n+tagSize)
	g := k.sealer(data)
	plain := store.AppendRecord(data[nonceSize:], &inner)
	var buf [256]byte
	ad := associatedData(buf[:0], storageKey, out)
	// The ciphertext overwrites the plaintext in place (data's spare
	// capacity starts where plain does).
	out.Sealed.Data = g.Seal(data, data[12:nonceSize], plain, ad)
	return out
}

// open returns the record sealed in rec, stored under storageKey. An error
// is a *store.SealError: the key is not in the keyring, the record does not
// authenticate (changed, or moved from another key), or what it holds is
// not a record.
func (kr *Keyring) open(storageKey string, rec *store.Record) (*store.Record, error) {
	s := rec.Sealed
	var k *key
	if kr != nil {
		k = kr.find(s.KeyID)
	}
	if k == nil {
		return nil, &store.SealError{KeyID: s.KeyID, Err: store.ErrKeyUnknown}
	}
	if len(s.Data) < overhead {
		return nil, &store.SealError{KeyID: s.KeyID, Err: store.ErrAuthFailed}
	}
	var buf [256]byte
	ad := associatedData(buf[:0], storageKey, rec)
	// Into a buffer of its own: the store's bytes may be shared (the memory
	// store's slabs) and are never written.
	plain := make([]byte, 0, len(s.Data)-overhead)
	plain, err := k.opener(s.Data).Open(plain, s.Data[12:nonceSize], s.Data[nonceSize:], ad)
	if err != nil {
		return nil, &store.SealError{KeyID: s.KeyID, Err: store.ErrAuthFailed}
	}
	inner, err := store.DecodeRecord(plain)
	if err == nil && (inner.BodyOmitted != rec.BodyOmitted || len(inner.Body) != s.BodyBytes) {
		err = store.ErrCorrupt
	}
	if err != nil {
		return nil, &store.SealError{KeyID: s.KeyID, Err: err}
	}
	inner.Status, inner.Fingerprint, inner.CreatedAt, inner.Request = rec.Status, rec.Fingerprint, rec.CreatedAt, rec.Request
	inner.Lookup = rec.Lookup
	return inner, nil
}

// associatedData appends what a sealed record is bound to: its storage key
// and its readable fields, in the record encoding (deterministic).
func associatedData(dst []byte, storageKey string, rec *store.Record) []byte {
	dst = append(dst, adPrefix...)
	dst = binary.AppendUvarint(dst, uint64(len(storageKey)))
	dst = append(dst, storageKey...)
	meta := store.Record{
		Status: rec.Status, Fingerprint: rec.Fingerprint, CreatedAt: rec.CreatedAt, BodyOmitted: rec.BodyOmitted,
		Request: rec.Request,
		Lookup:  rec.Lookup, // zero in records sealed before it was kept: their data is unchanged
		Sealed:  &store.Sealed{KeyID: rec.Sealed.KeyID, BodyBytes: rec.Sealed.BodyBytes},
	}
	return store.AppendRecord(dst, &meta)
}
