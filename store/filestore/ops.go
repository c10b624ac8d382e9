package filestore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Begin acquires a lease on key, described by l, or reports what is
// there. A completed record this process holds in memory (recent.go) is
// answered from there; another key that holds a live entry from a read
// transaction; only a key that needs a lease waits for a commit.
func (s *Store) Begin(ctx context.Context, key string, l store.Lease, ttl time.Duration) (store.BeginResult, error) {
	if e, ok := s.recent.get(key, s.now().UnixNano()); ok {
		return result(&e)
	}
	v := s.recent.version()
	e, found, err := s.live("begin", key)
	if err != nil {
		return store.BeginResult{}, err
	}
	if found {
		if e.isRecord() {
			s.recent.fill(key, e, v)
		}
		return result(&e)
	}
	if !s.roomOnDisk() {
		return store.BeginResult{}, s.diskFullError("begin")
	}
	var res store.BeginResult
	err = s.write(ctx, "begin", func(t *txn) error {
		e, found, err := t.live(key)
		if err != nil {
			return err
		}
		if found {
			e.copyEnc()
			res, err = result(&e)
			return err
		}
		enc := store.AppendLease(nil, &l)
		size := entrySize(key, len(enc))
		if err := t.makeRoom(size); err != nil {
			return err
		}
		token := newToken()
		ne := entry{kind: kindLease, fp: l.Fingerprint, expires: t.now + int64(ttl), enc: enc}
		ne.indexed = ne.expires
		copy(ne.token[:], token)
		if err := t.put(key, &ne); err != nil {
			return err
		}
		t.used += size
		res = store.BeginResult{State: store.Acquired, Token: token, Fingerprint: l.Fingerprint}
		return nil
	})
	return res, err
}

// result reports the live entry e that Begin found.
func result(e *entry) (store.BeginResult, error) {
	if !e.isRecord() {
		l, err := decodeLease(e.enc, e.fp)
		if err != nil {
			return store.BeginResult{}, err
		}
		return store.BeginResult{State: store.InFlight, Fingerprint: e.fp, Lease: l}, nil
	}
	rec, err := decode(e.enc)
	if err != nil {
		return store.BeginResult{}, err
	}
	return store.BeginResult{State: store.Completed, Fingerprint: rec.Fingerprint, Record: rec}, nil
}

// Extend renews the lease of token on key.
func (s *Store) Extend(ctx context.Context, key, token string, lease time.Duration) error {
	return s.write(ctx, "extend", func(t *txn) error {
		e, ok, err := t.owned(key, token)
		if err != nil || !ok {
			return lost("extend", err)
		}
		e.expires = t.now + int64(lease)
		if e.expires < e.indexed {
			// A shorter renewal: index the earlier expiry, so the
			// index never points past an entry's end.
			if err := t.expiry.Delete(indexKey(e.indexed, key)); err != nil {
				return err
			}
			e.indexed = e.expires
			if err := t.expiry.Put(indexKey(e.indexed, key), nil); err != nil {
				return err
			}
		}
		t.changes = append(t.changes, change{key: key})
		return t.keys.Put([]byte(key), e.marshal())
	})
}

// Complete replaces the lease of token on key with rec, kept for ttl. A
// record that does not fit fails with store.ErrFull and leaves the lease.
// Completing again with the same token and the same record succeeds: that
// is a retry whose first attempt's answer was lost.
func (s *Store) Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	if !s.roomOnDisk() {
		return s.diskFullError("complete")
	}
	enc := store.AppendRecord(make([]byte, 0, store.EncodedSize(rec)), rec)
	return s.write(ctx, "complete", func(t *txn) error {
		e, ok, err := t.live(key)
		switch {
		case err != nil:
			return err
		case !ok:
			return lost("complete", nil)
		case e.isRecord() && e.ownedBy(token) && bytes.Equal(e.enc, enc):
			return nil
		case e.isRecord() || !e.ownedBy(token):
			return lost("complete", nil)
		}
		leaseSize := e.size(key)
		ne := entry{kind: kindRecord, token: e.token, fp: rec.Fingerprint, expires: t.now + int64(ttl), enc: enc}
		ne.indexed = ne.expires
		grow := ne.size(key) - leaseSize
		if err := t.makeRoom(grow); err != nil {
			return err
		}
		// makeRoom never drops a lease, so e is still there.
		if err := t.expiry.Delete(indexKey(e.indexed, key)); err != nil {
			return err
		}
		if err := t.put(key, &ne); err != nil {
			return err
		}
		t.used += grow
		t.records++
		return nil
	})
}

// Release deletes the lease of token on key; it does nothing when token does
// not own key.
func (s *Store) Release(ctx context.Context, key, token string) error {
	return s.write(ctx, "release", func(t *txn) error {
		e, ok, err := t.owned(key, token)
		if err != nil || !ok {
			return err
		}
		return t.remove(key, &e)
	})
}

func lost(op string, err error) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("file %s: %w", op, store.ErrLockLost)
}

// lookup reads the unexpired entry under key from b.
func lookup(b *bolt.Bucket, key string, now int64) (entry, bool, error) {
	v := b.Get([]byte(key))
	if v == nil {
		return entry{}, false, nil
	}
	e, err := unmarshal(v)
	if err != nil || now >= e.expires {
		return entry{}, false, err
	}
	return e, true, nil
}

// live returns the unexpired entry under key, deleting an expired one.
func (t *txn) live(key string) (entry, bool, error) {
	v := t.keys.Get([]byte(key))
	if v == nil {
		return entry{}, false, nil
	}
	e, err := unmarshal(v)
	if err != nil {
		return entry{}, false, err
	}
	if t.now >= e.expires {
		return entry{}, false, t.remove(key, &e)
	}
	return e, true, nil
}

// owned returns the live lease under key if token owns it.
func (t *txn) owned(key, token string) (entry, bool, error) {
	e, ok, err := t.live(key)
	if err != nil || !ok || e.isRecord() || !e.ownedBy(token) {
		return entry{}, false, err
	}
	return e, true, nil
}

// put writes e under key with its index entry. The caller accounts for it.
func (t *txn) put(key string, e *entry) error {
	if err := t.keys.Put([]byte(key), e.marshal()); err != nil {
		return err
	}
	if e.isRecord() {
		r := *e
		t.changes = append(t.changes, change{key, &r})
	} else {
		t.changes = append(t.changes, change{key: key})
	}
	return t.expiry.Put(indexKey(e.indexed, key), nil)
}

// remove deletes e, the entry under key, and its index entry.
func (t *txn) remove(key string, e *entry) error {
	if err := t.keys.Delete([]byte(key)); err != nil {
		return err
	}
	t.changes = append(t.changes, change{key: key})
	if err := t.expiry.Delete(indexKey(e.indexed, key)); err != nil {
		return err
	}
	t.used -= e.size(key)
	if e.isRecord() {
		t.records--
	}
	return nil
}

// removeDamaged deletes the entry under key whose bytes do not decode
// (errCorrupt), counting it at the size its bytes give. Its index entry,
// which cannot be found without them, is dropped by the sweep that
// reaches it (settle).
func (t *txn) removeDamaged(key string) error {
	v := t.keys.Get([]byte(key))
	size, record := entrySize(key, max(len(v)-headerLen, 0)), len(v) > 0 && v[0] == kindRecord
	t.changes = append(t.changes, change{key: key})
	if err := t.keys.Delete([]byte(key)); err != nil {
		return err
	}
	t.used = max(t.used-size, 0)
	if record {
		t.records--
	}
	return nil
}

// newToken returns 128 random bits, hex-encoded.
func newToken() string {
	var b [tokenLen / 2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// live reads key's unexpired entry in a read transaction named op, its
// encoding copied out of bbolt's pages (which the transaction's end frees).
func (s *Store) live(op, key string) (e entry, found bool, err error) {
	err = s.view(op, func(tx *bolt.Tx) error {
		var err error
		e, found, err = lookup(tx.Bucket(bucketKeys), key, s.now().UnixNano())
		if found {
			e.copyEnc()
		}
		return err
	})
	return e, found, err
}
