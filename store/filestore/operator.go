package filestore

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Inspect returns the lease or record under key, or store.ErrNotFound.
func (s *Store) Inspect(_ context.Context, key string) (store.Entry, error) {
	e, found, err := s.live("inspect", key)
	if err != nil {
		return store.Entry{}, err
	}
	if !found {
		return store.Entry{}, fmt.Errorf("file inspect: %w", store.ErrNotFound)
	}
	return toEntry(key, &e, true)
}

// Delete removes the lease or record under key, or returns
// store.ErrNotFound. The owner of a deleted lease then gets
// store.ErrLockLost from Extend and Complete.
func (s *Store) Delete(ctx context.Context, key string) error {
	return s.write(ctx, "delete", func(t *txn) error {
		e, ok, err := t.live(key)
		if errors.Is(err, errCorrupt) {
			return t.removeDamaged(key)
		}
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("file delete: %w", store.ErrNotFound)
		}
		return t.remove(key, &e)
	})
}

// List returns up to limit entries in state (0 for all) after cursor ("" to
// start), in key order, and the cursor of the next page ("" when done). An
// entry present for the whole listing is returned exactly once; a cursor
// stays valid across restarts. Listed records carry no Body. An entry
// whose bytes do not decode is listed as store.UnreadableEntry, its
// expiry unknown when its header is damaged. A page reads at most
// listBytes of entries (and one at least), ending early with a cursor.
func (s *Store) List(_ context.Context, state store.State, cursor string, limit int) ([]store.Entry, string, error) {
	if limit <= 0 {
		return nil, "", errors.New("file list: limit must be positive")
	}
	after, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return nil, "", fmt.Errorf("file list: malformed cursor %q", cursor)
	}
	var out []store.Entry
	more, read := false, 0
	now := s.now().UnixNano()
	err = s.view("list", func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketKeys).Cursor()
		k, v := c.Seek(after)
		if len(after) > 0 && string(k) == string(after) {
			k, v = c.Next()
		}
		for ; k != nil; k, v = c.Next() {
			e, err := unmarshal(v)
			damaged := errors.Is(err, errCorrupt) // its kind and expiry unknown
			switch {
			case damaged && !state.Lists(true):
				continue
			case damaged:
			case err != nil:
				return err
			case now >= e.expires || !state.Lists(e.isRecord()):
				continue
			}
			if len(out) == limit || len(out) > 0 && read+len(v) > listBytes {
				more = true
				return nil
			}
			read += len(v)
			var ent store.Entry
			if !damaged {
				e.copyEnc() // a listed record's Sealed aliases its encoding
				ent, err = toEntry(string(k), &e, false)
			}
			if err != nil && errors.Is(err, store.ErrUnreadable) {
				ent = store.UnreadableEntry(string(k), !damaged && !e.isRecord(), expiresAt(damaged, e.expires), err)
			} else if err != nil {
				return err
			}
			out = append(out, ent)
		}
		return nil
	})
	if err != nil || !more {
		return out, "", err
	}
	return out, base64.RawURLEncoding.EncodeToString([]byte(out[len(out)-1].Key)), nil
}

// listBytes is how many bytes of entries one page of a listing reads at
// most: a sealed record's listing keeps its sealed header and body, so a
// page of limit records of max_response_body each would otherwise hold
// them all at once.
var listBytes = 16 << 20

// expiresAt is when an entry that expires at ns expires: zero when its
// header is damaged, so that its expiry is unknown.
func expiresAt(damaged bool, ns int64) time.Time {
	if damaged {
		return time.Time{}
	}
	return unixNano(ns)
}

// toEntry describes e, the entry under key; withBody false leaves the
// record's Body nil. e's record must not alias a finished transaction.
func toEntry(key string, e *entry, withBody bool) (store.Entry, error) {
	ent := store.Entry{Key: key, State: store.InFlight, Fingerprint: e.fp, ExpiresAt: unixNano(e.expires)}
	if !e.isRecord() {
		l, err := decodeLease(e.enc, e.fp)
		if err != nil {
			return store.Entry{}, err
		}
		ent.Lease = l
		return ent, nil
	}
	rec, err := decode(e.enc)
	if err != nil {
		return store.Entry{}, err
	}
	ent.State, ent.Record, ent.BodyBytes = store.Completed, rec, rec.BodyBytes()
	if !withBody {
		rec.Body = nil
	}
	return ent, nil
}

// typicalLease is what a lease as the proxy takes it counts against
// MaxBytes (see entrySize): a 32-digit key_hash, twice, about a hundred
// bytes of description, and the overhead.
const typicalLease = 2*32 + 128 + entryOverhead

// Health names the engine and says how full the store is; it is Full when
// a lease for a new key would not fit and nothing can be evicted for it,
// or when the disk was found full.
func (s *Store) Health(context.Context) (store.Health, error) {
	used := s.used.Load()
	full := used+typicalLease > s.maxBytes
	if full && s.evict {
		full = s.records.Load() == 0
	}
	return store.Health{
		Server: engineVersion(),
		Detail: fmt.Sprintf("%d records, %d of max_bytes %d", s.records.Load(), used, s.maxBytes),
		Full:   full || s.diskFull.Load(),
	}, nil
}

// engineVersion is "bbolt" and its module version, as built in.
var engineVersion = sync.OnceValue(func() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "go.etcd.io/bbolt" {
				return "bbolt " + d.Version
			}
		}
	}
	return "bbolt"
})

func unixNano(n int64) time.Time { return time.Unix(0, n).UTC() }
