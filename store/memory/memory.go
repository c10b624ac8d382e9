// Package memory is an in-process idempotency store for a single proxy
// instance: the zero-configuration default.
//
// Keys are spread over 64 shards, each with its own mutex, so unrelated keys
// do not contend. An entry is either an in-flight lease (owner token,
// request fingerprint, expiry, description) or a completed record (with its expiry).
// Expired entries count as absent as soon as their time has passed; a
// background sweeper reclaims their memory, visiting one shard per tick and a
// bounded number of entries per visit, so no request ever pays for a full
// scan. Close stops the sweeper.
//
// # Size bound
//
// Options.MaxBytes bounds the approximate size of the stored records and
// leases. When the store is full:
//
//   - Begin on a new key fails with an error wrapping store.ErrFull (which
//     is store.ErrUnavailable), so the proxy applies its on_store_error
//     policy. Begin on an existing key still reports its state.
//   - Complete of an owned lease whose record does not fit fails with
//     store.ErrFull and leaves the lease in place: the caller keeps it alive
//     with Extend and stores a smaller record (status and headers) or tries
//     again later.
//   - With WhenFull EvictOldest, both first drop the oldest completed
//     records until the new entry fits (counted in Stats().Evictions).
//     In-flight leases are never evicted: that would let a second request
//     run while the first still does.
//
// # Layout
//
// A completed record is kept encoded (store.AppendRecord) and decoded by
// each Begin or Inspect that finds it, and the encodings and keys lie back
// to back in large append-only byte slabs, indexed by slots that hold no
// pointers (see table). The garbage collector then has almost nothing to
// trace: kept as Go objects — a header map, slices and strings, or even
// one byte slice per record under a string key — records were objects to
// mark on every collection, in a random order through memory, which with a
// hundred thousand records cost every collection 10 ms or more of the
// proxy's CPU. Under EvictOldest the eviction queue adds a copy of each
// record's key. The body of a record returned by Begin or Inspect aliases
// a slab and must not be modified; slab bytes are never written twice.
package memory

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

const (
	shardCount = 64
	// sweepBudget bounds the entries examined per shard visit.
	sweepBudget = 4096
	// defaultSweepInterval is the pause between two shard visits: a full
	// cycle over all shards takes 64 times as long.
	defaultSweepInterval = 50 * time.Millisecond
)

// Store is the in-memory store. It is safe for concurrent use.
type Store struct {
	shards   [shardCount]shard
	seed     maphash.Seed
	now      func() time.Time
	maxBytes int64
	used     atomic.Int64
	records  atomic.Int64
	// evict is nil unless Options.WhenFull is EvictOldest.
	evict *evictQueue

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

type shard struct {
	mu     sync.Mutex
	t      table
	tokens tokens
}

// New returns a store and starts its sweeper.
func New(opts Options) *Store {
	s := &Store{
		seed:     maphash.MakeSeed(),
		now:      opts.Now,
		maxBytes: opts.MaxBytes,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if opts.WhenFull == store.EvictOldest && opts.MaxBytes > 0 {
		s.evict = &evictQueue{}
	}
	for i := range s.shards {
		s.shards[i].t = newTable()
	}
	interval := opts.SweepInterval
	if interval == 0 {
		interval = defaultSweepInterval
	}
	if interval < 0 {
		close(s.done)
		return s
	}
	go s.sweepLoop(interval)
	return s
}

// Begin acquires a lease on key, described by l, or reports what is there.
func (s *Store) Begin(_ context.Context, key string, l store.Lease, ttl time.Duration) (store.BeginResult, error) {
	h, sh := s.locate(key)
	now := s.now()
	sh.mu.Lock()
	_, e := s.live(sh, h, key, now)
	if e == nil {
		// Only a new key takes room: its lease's.
		enc := encodeLease(&l)
		defer putEncoding(enc)
		if !fits(len(key), len(*enc)) {
			sh.mu.Unlock()
			return store.BeginResult{}, fmt.Errorf("memory begin: a lease of %d bytes is too large for the memory store", len(*enc))
		}
		size := int64(len(key)+len(*enc)) + entryOverhead
		if s.evict != nil && s.wouldOverflow(size) {
			// Evict only for a key that needs room, and without the lock:
			// eviction takes other shards' locks.
			sh.mu.Unlock()
			s.makeRoom(size)
			sh.mu.Lock()
			_, e = s.live(sh, h, key, now)
		}
		if e == nil {
			token, err := s.acquire(sh, h, key, l.Fingerprint, *enc, size, now, ttl)
			sh.mu.Unlock()
			if err != nil {
				return store.BeginResult{}, err
			}
			return store.BeginResult{State: store.Acquired, Token: token, Fingerprint: l.Fingerprint}, nil
		}
	}
	// A stored encoding never changes: decode it without the lock, beside
	// a copy of its entry.
	kept := *e
	enc := sh.t.enc(&kept)
	sh.mu.Unlock()
	return found(&kept, enc)
}

// acquire stores a new lease on key, on a request of fingerprint fp, whose
// description encodes to enc and which counts size bytes, and returns its
// token; or fails when the store is full. sh.mu must be held.
func (s *Store) acquire(sh *shard, h uint64, key string, fp store.Fingerprint, enc []byte, size int64, now time.Time, ttl time.Duration) (string, error) {
	if s.wouldOverflow(size) {
		// Reclaim what has expired in this shard before refusing.
		s.sweep(sh, now, len(sh.t.slots))
		if s.wouldOverflow(size) {
			return "", s.fullError("begin")
		}
	}
	raw, token := sh.tokens.take()
	sh.t.put(h, key, entry{token: raw, fp: fp, expires: now.Add(ttl).UnixNano()}, enc)
	s.used.Add(size)
	return token, nil
}

// found reports the live entry e that Begin found; enc is its encoding.
func found(e *entry, enc []byte) (store.BeginResult, error) {
	if !e.record {
		l, err := decodeLease(enc, e.fp)
		if err != nil {
			return store.BeginResult{}, err
		}
		return store.BeginResult{State: store.InFlight, Fingerprint: e.fp, Lease: l}, nil
	}
	rec, err := decode(enc)
	if err != nil {
		return store.BeginResult{}, err
	}
	return store.BeginResult{State: store.Completed, Fingerprint: rec.Fingerprint, Record: rec}, nil
}

// encodings recycles the buffers records are encoded into before they are
// copied into a slab.
var encodings = sync.Pool{New: func() any { return new([]byte) }}

// encode returns rec encoded, in a buffer to give back with putEncoding.
func encode(rec *store.Record) *[]byte {
	buf := encodings.Get().(*[]byte)
	*buf = store.AppendRecord((*buf)[:0], rec)
	return buf
}

// encodeLease returns l's description encoded, in a buffer to give back
// with putEncoding.
func encodeLease(l *store.Lease) *[]byte {
	buf := encodings.Get().(*[]byte)
	*buf = store.AppendLease((*buf)[:0], l)
	return buf
}

// putEncoding recycles buf, unless it grew too large to keep.
func putEncoding(buf *[]byte) {
	if cap(*buf) <= slabSize {
		encodings.Put(buf)
	}
}

// decodeLease decodes a stored lease description of a lease on fp.
func decodeLease(enc []byte, fp store.Fingerprint) (store.Lease, error) {
	l, err := store.DecodeLease(enc, fp)
	if err != nil {
		return store.Lease{}, fmt.Errorf("memory store: %w", err)
	}
	return l, nil
}

// decode decodes a stored record; the record's body aliases enc.
func decode(enc []byte) (*store.Record, error) {
	rec, err := store.DecodeRecord(enc)
	if err != nil {
		return nil, fmt.Errorf("memory store: %w", err)
	}
	return rec, nil
}

// Extend renews the lease of token on key.
func (s *Store) Extend(_ context.Context, key, token string, lease time.Duration) error {
	h, sh := s.locate(key)
	now := s.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := s.owned(sh, h, key, token, now)
	if i < 0 {
		return fmt.Errorf("memory extend: %w", store.ErrLockLost)
	}
	sh.t.at(i).expires = now.Add(lease).UnixNano()
	return nil
}

// Complete replaces the lease of token on key with rec, kept for ttl. A
// record that does not fit fails with store.ErrFull and leaves the lease.
// Completing again with the same token and the same record succeeds: that
// is a retry whose first attempt's answer was lost.
func (s *Store) Complete(_ context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	// Encode before taking the lock: the shard's other keys need not wait.
	enc := encode(rec)
	defer putEncoding(enc)
	if !fits(len(key), len(*enc)) {
		return fmt.Errorf("memory complete: a record of %d bytes is too large for the memory store", len(*enc))
	}
	size := int64(len(key)+len(*enc)) + entryOverhead
	h, sh := s.locate(key)
	now := s.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	lease, done, err := s.completable(sh, h, key, token, *enc, now)
	if err != nil || done {
		return err
	}
	leaseSize := lease.size()
	if s.evict != nil && s.wouldOverflow(size-leaseSize) {
		// Evict without the lock (eviction takes other shards' locks),
		// then look again: the lease may have changed meanwhile.
		sh.mu.Unlock()
		s.makeRoom(size - leaseSize)
		sh.mu.Lock()
		if lease, done, err = s.completable(sh, h, key, token, *enc, now); err != nil || done {
			return err
		}
		leaseSize = lease.size()
	}
	if s.wouldOverflow(size - leaseSize) {
		return s.fullError("complete")
	}
	s.used.Add(size - leaseSize)
	s.records.Add(1)
	ne := entry{token: lease.token, fp: rec.Fingerprint, expires: now.Add(ttl).UnixNano(), record: true}
	if s.evict != nil {
		ne.seq = s.evict.push(strings.Clone(key), now.UnixNano(), ne.expires)
	}
	sh.t.put(h, key, ne, *enc)
	return nil
}

// completable returns token's lease on key (as table.find's entry); or done
// when key holds the record a previous Complete of token stored, encoding
// to enc (the caller then has nothing to do); or ErrLockLost. sh.mu must be
// held.
func (s *Store) completable(sh *shard, h uint64, key, token string, enc []byte, now time.Time) (*entry, bool, error) {
	_, e := s.live(sh, h, key, now)
	switch {
	case e == nil:
		return nil, false, fmt.Errorf("memory complete: %w", store.ErrLockLost)
	case e.record && e.ownedBy(token) && bytes.Equal(sh.t.enc(e), enc):
		return nil, true, nil
	case e.record || !e.ownedBy(token):
		return nil, false, fmt.Errorf("memory complete: %w", store.ErrLockLost)
	}
	return e, false, nil
}

// Release deletes the lease of token on key; it does nothing when token does
// not own key.
func (s *Store) Release(_ context.Context, key, token string) error {
	h, sh := s.locate(key)
	now := s.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i := s.owned(sh, h, key, token, now); i >= 0 {
		s.remove(sh, i)
	}
	return nil
}

// Ping always succeeds: the store is in process.
func (s *Store) Ping(context.Context) error { return nil }

// Close stops the sweeper. The store stays usable; entries are then only
// reclaimed on access.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		select {
		case <-s.done: // sweeper disabled
		default:
			close(s.stop)
			<-s.done
		}
	})
	return nil
}

// locate returns key's hash and its shard.
func (s *Store) locate(key string) (uint64, *shard) {
	h := maphash.String(s.seed, key)
	return h, &s.shards[h%shardCount]
}

// live returns the slot of the unexpired entry under key and the entry (as
// table.find's), or -1 and nil, removing an expired one. sh.mu must be held.
func (s *Store) live(sh *shard, h uint64, key string, now time.Time) (int32, *entry) {
	i, e := sh.t.find(h, key)
	if e == nil {
		return -1, nil
	}
	if now.UnixNano() >= e.expires {
		s.remove(sh, i)
		return -1, nil
	}
	return i, e
}

// owned returns the slot of the live lease under key if token owns it, or
// -1. sh.mu must be held.
func (s *Store) owned(sh *shard, h uint64, key, token string, now time.Time) int32 {
	i, e := s.live(sh, h, key, now)
	if e == nil || e.record || !e.ownedBy(token) {
		return -1
	}
	return i
}

// remove deletes the entry in slot i. sh.mu must be held.
func (s *Store) remove(sh *shard, i int32) {
	e := sh.t.at(i)
	s.used.Add(-e.size())
	if e.record {
		s.records.Add(-1)
	}
	sh.t.remove(i)
}

func (s *Store) wouldOverflow(delta int64) bool {
	return s.maxBytes > 0 && s.used.Load()+delta > s.maxBytes
}

func (s *Store) fullError(op string) error {
	return fmt.Errorf("memory %s: at %d of %d bytes: %w", op, s.used.Load(), s.maxBytes, store.ErrFull)
}
