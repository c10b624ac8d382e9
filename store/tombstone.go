package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// TombstoneSuffix ends the storage key of a tombstone kept by Tombstones:
// the tombstone of key k is a small record under k + TombstoneSuffix.
const TombstoneSuffix = "/expired"

// ReconcileSuffix ends the storage key of the marker of a key whose
// unknown outcome is being settled by lookups (on_upstream_error:
// reconcile): a small record under k + ReconcileSuffix, written by the
// proxy through the ordinary operations, so every store keeps it and the
// encryption layer seals it like any other record.
const ReconcileSuffix = "/reconcile"

// MarkerPending is the header of a marker written before its key's
// request was sent, while its outcome is not yet known: the key is in
// flight, not being settled.
const MarkerPending = "Pending"

// ReleasedSuffix ends the storage key of a released note: what the client
// of a respond-async request would have been told when its key was
// released, kept a short while for the polls of its status URL. The note
// is named by the status URL (a hash of its key and MAC, then this
// suffix), never by the key itself, and written through the ordinary
// operations as a marker is.
const ReleasedSuffix = "/released"

// Tombstones is a Store that remembers keys whose record expired, for
// expired_keys: reject: a Complete whose record has a Tombstone also
// writes a tombstone — the fingerprint and when the record expires, no
// response — kept for the record's ttl plus Tombstone; while it is there
// and the record is gone, Begin answers Expired instead of taking a lease.
//
// It works over any store through its own operations, so every kind keeps
// tombstones the same way. It costs nothing until Check(true): the proxy
// switches it on while some route rejects expired keys. Then a Begin that
// takes a lease reads the tombstone's key once more (a replay does not),
// and a completion with a tombstone writes it in two more operations.
//
// Over a TombstoneKeeper it steps aside: every call goes to the store,
// which keeps tombstones in its own Begin and Complete, and Check
// switches the store's.
type Tombstones struct {
	Store
	keeper TombstoneKeeper // nil unless the store keeps tombstones itself
	on     atomic.Bool
	now    func() time.Time
}

// TombstoneKeeper is a Store that keeps tombstones itself, as Tombstones
// does over any store, without the operations Tombstones adds: a Begin
// that looks for the tombstone in its own round trip while
// CheckTombstones(true), a Complete that writes record and tombstone
// together, a Delete that deletes both, and a List without tombstones.
type TombstoneKeeper interface {
	Store
	// CheckTombstones switches looking for tombstones in Begin on or off.
	CheckTombstones(on bool)
}

// WithTombstones returns next keeping tombstones. now is the clock of
// ExpiredAt; nil means time.Now.
func WithTombstones(next Store, now func() time.Time) *Tombstones {
	if now == nil {
		now = time.Now
	}
	k, _ := next.(TombstoneKeeper)
	return &Tombstones{Store: next, keeper: k, now: now}
}

// Check switches looking for tombstones in Begin on or off.
func (s *Tombstones) Check(on bool) {
	s.on.Store(on)
	if s.keeper != nil {
		s.keeper.CheckTombstones(on)
	}
}

// Begin is the store's Begin; with tombstones on, a key it found free is
// reported Expired when its tombstone is there, and its lease released.
func (s *Tombstones) Begin(ctx context.Context, key string, l Lease, ttl time.Duration) (BeginResult, error) {
	res, err := s.Store.Begin(ctx, key, l, ttl)
	if err != nil || res.State != Acquired || !s.on.Load() || s.keeper != nil {
		return res, err
	}
	e, err := s.Store.Inspect(ctx, key+TombstoneSuffix)
	switch {
	case errors.Is(err, ErrNotFound), err == nil && (e.State != Completed || e.Record == nil):
		return res, nil
	case err != nil:
		// Unknown whether the key is remembered: give the lease back and
		// let the caller apply its store-error policy.
		_ = s.Store.Release(ctx, key, res.Token)
		return BeginResult{}, fmt.Errorf("tombstone of key: %w", err)
	}
	if err := s.Store.Release(ctx, key, res.Token); err != nil {
		return BeginResult{}, fmt.Errorf("release after tombstone: %w", err)
	}
	// The record may have gone before its time (an eviction): it expired
	// now, not in the future.
	at := e.Record.CreatedAt
	if now := s.now(); now.Before(at) {
		at = now
	}
	return BeginResult{State: Expired, Fingerprint: e.Record.Fingerprint, ExpiredAt: at}, nil
}

// Complete is the store's Complete; a record with a Tombstone then has its
// tombstone written, kept for ttl plus Tombstone. A tombstone that could
// not be written is an error: the record is stored, and a retried
// Complete of the same record succeeds and writes it.
func (s *Tombstones) Complete(ctx context.Context, key, token string, rec *Record, ttl time.Duration) error {
	if err := s.Store.Complete(ctx, key, token, rec, ttl); err != nil || rec.Tombstone <= 0 || s.keeper != nil {
		return err
	}
	tomb := &Record{Status: 410, Fingerprint: rec.Fingerprint, CreatedAt: s.now().Add(ttl).Truncate(time.Millisecond)}
	tk := key + TombstoneSuffix
	for range 2 {
		res, err := s.Store.Begin(ctx, tk, Lease{Fingerprint: rec.Fingerprint}, time.Minute)
		if err != nil {
			return tombErr(err)
		}
		switch res.State {
		case Acquired:
			if err := s.Store.Complete(ctx, tk, res.Token, tomb, ttl+rec.Tombstone); err != nil {
				return tombErr(err)
			}
			return nil
		case Completed:
			// An older tombstone of the key: this one replaces it.
			if err := s.Store.Delete(ctx, tk); err != nil && !errors.Is(err, ErrNotFound) {
				return tombErr(err)
			}
		default:
			return nil // another completion of the key writes it
		}
	}
	return nil
}

// tombErr is a failure to write a tombstone after its record was stored:
// ErrUnavailable whatever the cause, so the caller retries the same
// completion (which succeeds again) rather than store another record, as
// it would after ErrFull.
func tombErr(err error) error {
	return fmt.Errorf("write tombstone (the record is stored): %v: %w", err, ErrUnavailable)
}

// Delete deletes key and its tombstone: a key an operator deleted is new.
func (s *Tombstones) Delete(ctx context.Context, key string) error {
	err := s.Store.Delete(ctx, key)
	if s.keeper != nil {
		return err
	}
	if terr := s.Store.Delete(ctx, key+TombstoneSuffix); terr != nil && !errors.Is(terr, ErrNotFound) {
		return terr
	}
	return err
}

// List is the store's List without the tombstones.
func (s *Tombstones) List(ctx context.Context, state State, cursor string, limit int) ([]Entry, string, error) {
	entries, next, err := s.Store.List(ctx, state, cursor, limit)
	if s.keeper != nil {
		return entries, next, err
	}
	out := entries[:0]
	for _, e := range entries {
		if !strings.HasSuffix(e.Key, TombstoneSuffix) {
			out = append(out, e)
		}
	}
	return out, next, err
}
