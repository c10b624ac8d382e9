package filestore

import (
	"context"
	"fmt"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

const (
	// sweepBatch bounds the index entries one sweep examines, so that a
	// sweep is one short transaction among the requests' commits.
	sweepBatch = 1000
	// evictBatch bounds the index entries one write examines to make room.
	evictBatch = 10000
)

// sweepLoop deletes expired entries until Close: at once again after a
// sweep that found a full batch, else after interval.
func (s *Store) sweepLoop(interval time.Duration) {
	defer close(s.swept)
	ctx := context.Background()
	for {
		var full bool
		err := s.write(ctx, "sweep", func(t *txn) error {
			var err error
			full, err = t.sweep(sweepBatch)
			return err
		})
		s.refillReserve()
		wait := interval
		if err == nil && full {
			wait = 0
		}
		select {
		case <-s.stopSweep:
			return
		case <-time.After(wait):
		}
	}
}

// sweep walks the expiry index from its start, examining at most n
// entries, and deletes the entries whose time has passed. An index entry
// left behind by a renewed lease is moved to the lease's new expiry; one
// whose key holds a newer entry is dropped. It reports whether it stopped
// at its bound rather than at an entry still live.
func (t *txn) sweep(n int) (bool, error) {
	c := t.expiry.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.First() {
		if n == 0 {
			return true, nil
		}
		n--
		at, key := parseIndexKey(k)
		if at > t.now {
			return false, nil
		}
		key = append([]byte(nil), key...)
		if err := t.settle(at, key); err != nil {
			return false, err
		}
	}
	return false, nil
}

// settle handles the index entry of key at time at, which has passed.
func (t *txn) settle(at int64, key []byte) error {
	ik := indexKey(at, string(key))
	v := t.keys.Get(key)
	if v == nil {
		return t.expiry.Delete(ik)
	}
	e, err := unmarshal(v)
	if err != nil {
		// Its expiry cannot be read: it stays, refusing its key, until an
		// operator deletes it, and the sweep goes on past it.
		return t.expiry.Delete(ik)
	}
	switch {
	case e.indexed != at:
		return t.expiry.Delete(ik)
	case t.now >= e.expires:
		return t.remove(string(key), &e)
	}
	// A renewed lease: index it at its expiry.
	if err := t.expiry.Delete(ik); err != nil {
		return err
	}
	e.indexed = e.expires
	t.changes = append(t.changes, change{key: string(key)})
	if err := t.keys.Put(key, e.marshal()); err != nil {
		return err
	}
	return t.expiry.Put(indexKey(e.indexed, string(key)), nil)
}

// makeRoom makes delta more bytes fit under MaxBytes, or fails with
// store.ErrFull. It first deletes what has expired, then, under
// EvictOldest, the completed records nearest to their expiry. Leases are
// never evicted: that would let a second request run while the first
// still does.
func (t *txn) makeRoom(delta int64) error {
	if !t.over(delta) {
		return nil
	}
	if _, err := t.sweep(evictBatch); err != nil {
		return err
	}
	if t.over(delta) && t.s.evict {
		if err := t.evictOldest(delta); err != nil {
			return err
		}
	}
	if t.over(delta) {
		return fmt.Errorf("file store: at %d of %d bytes: %w", t.used, t.s.maxBytes, store.ErrFull)
	}
	return nil
}

func (t *txn) over(delta int64) bool { return t.used+delta > t.s.maxBytes }

// evictOldest deletes records in order of expiry until delta fits, looking
// at no more than evictBatch index entries.
func (t *txn) evictOldest(delta int64) error {
	c := t.expiry.Cursor()
	k, _ := c.First()
	for n := 0; k != nil && n < evictBatch && t.over(delta); n++ {
		at, key := parseIndexKey(k)
		e, ok, err := t.indexed(at, key)
		if err != nil {
			return err
		}
		if !ok || !e.isRecord() {
			k, _ = c.Next()
			continue
		}
		key = append([]byte(nil), key...)
		if err := t.remove(string(key), &e); err != nil {
			return err
		}
		t.evicted++
		// Deleting under a cursor moves it: seek past what was deleted.
		k, _ = c.Seek(indexKey(at, string(key)))
	}
	return nil
}

// indexed returns the entry the index entry (at, key) stands for, if it
// still does.
func (t *txn) indexed(at int64, key []byte) (entry, bool, error) {
	v := t.keys.Get(key)
	if v == nil {
		return entry{}, false, nil
	}
	e, err := unmarshal(v)
	if err != nil || e.indexed != at {
		return entry{}, false, nil // a damaged entry is never evicted: see settle
	}
	return e, true, nil
}
