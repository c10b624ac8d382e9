// Package memory is an in-process idempotency store for a single proxy
// instance: the zero-configuration default.
//
// Keys are spread over 64 shards, each with its own mutex, so unrelated keys
// do not contend. An entry is either an in-flight lease (owner token,
// request fingerprint, expiry) or a completed record (with its expiry).
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
// A completed record is kept encoded (store.AppendRecord), in one byte
// slice, and decoded by each Begin or Inspect that finds it. The garbage
// collector then has nothing to scan inside a record: kept as Go objects,
// a record's header map, slices and strings would be a dozen or more
// objects to mark on every collection, which with a few hundred thousand
// records made every request of the proxy measurably slower. For the same
// reason a completed entry is one object: its key and its encoding share an
// allocation, the map's key aliases it, and the owner token is kept inline
// (with EvictOldest, the eviction queue adds a copy of the key).
// The body of a record returned by Begin or Inspect aliases the stored
// encoding and must not be modified.
package memory

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

const (
	shardCount = 64
	// entryOverhead approximates the map slot, entry struct and key header
	// of one entry, so that many tiny entries still count against MaxBytes.
	entryOverhead = 128
	// sweepBudget bounds the entries examined per shard visit.
	sweepBudget = 4096
	// defaultSweepInterval is the pause between two shard visits: a full
	// cycle over all shards takes 64 times as long.
	defaultSweepInterval = 50 * time.Millisecond
)

// WhenFull selects what a full store does with a write that does not fit.
type WhenFull uint8

const (
	// Reject refuses the write with store.ErrFull.
	Reject WhenFull = iota
	// EvictOldest drops the oldest completed records until the write fits;
	// leases are never dropped.
	EvictOldest
)

var whenFullWords = []string{"reject", "evict_oldest"}

func (w WhenFull) String() string {
	if int(w) < len(whenFullWords) {
		return whenFullWords[w]
	}
	return "unknown"
}

// UnmarshalText parses the configuration's words, "reject" and "evict_oldest".
func (w *WhenFull) UnmarshalText(b []byte) error {
	i := slices.Index(whenFullWords, string(b))
	if i < 0 {
		return fmt.Errorf("must be one of %s", strings.Join(whenFullWords, ", "))
	}
	*w = WhenFull(i)
	return nil
}

// MarshalText gives the configuration's word.
func (w WhenFull) MarshalText() ([]byte, error) { return []byte(w.String()), nil }

// Options configure a Store. The zero value is an unbounded store on the
// wall clock.
type Options struct {
	// MaxBytes bounds the approximate memory used by entries; 0 means no
	// bound. See the package documentation for the behaviour when full.
	MaxBytes int64
	// WhenFull is what a write that would exceed MaxBytes does; the zero
	// value is Reject.
	WhenFull WhenFull
	// Now is the clock; nil means time.Now. Tests inject a fake clock.
	Now func() time.Time
	// SweepInterval is the pause between visits of the expiry sweeper to
	// one shard; 0 means 50ms, a negative value disables the sweeper.
	SweepInterval time.Duration
}

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
	mu sync.Mutex
	m  map[string]entry
}

// entry is a lease when enc is nil, a completed record otherwise. Its only
// pointer is to its encoded record, which holds none and shares its
// allocation with the key (see Complete). A record keeps the token of the
// lease it replaced, so that a completion retried by that owner is
// recognised.
type entry struct {
	enc     []byte // the encoded record
	token   [tokenLen]byte
	fp      store.Fingerprint
	expires int64 // Unix nanoseconds
	size    int64
	seq     uint64 // completion order, for EvictOldest
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
	if opts.WhenFull == EvictOldest && opts.MaxBytes > 0 {
		s.evict = &evictQueue{}
	}
	for i := range s.shards {
		s.shards[i].m = make(map[string]entry)
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

// Begin acquires a lease on key or reports what is there.
func (s *Store) Begin(_ context.Context, key string, fp store.Fingerprint, lease time.Duration) (store.BeginResult, error) {
	sh := s.shard(key)
	now := s.now()
	size := int64(len(key)) + entryOverhead
	sh.mu.Lock()
	e, ok := s.live(sh, key, now)
	if !ok && s.evict != nil && s.wouldOverflow(size) {
		// Evict only for a key that needs room, and without the lock:
		// eviction takes other shards' locks.
		sh.mu.Unlock()
		s.makeRoom(size)
		sh.mu.Lock()
		e, ok = s.live(sh, key, now)
	}
	if ok {
		// A stored encoding never changes: decode it without the lock.
		sh.mu.Unlock()
		return found(e)
	}
	defer sh.mu.Unlock()
	if s.wouldOverflow(size) {
		// Reclaim what has expired in this shard before refusing.
		s.sweep(sh, now, len(sh.m))
		if s.wouldOverflow(size) {
			return store.BeginResult{}, s.fullError("begin")
		}
	}
	token := newToken()
	ne := entry{fp: fp, expires: now.Add(lease).UnixNano(), size: size}
	copy(ne.token[:], token)
	sh.m[key] = ne
	s.used.Add(size)
	return store.BeginResult{State: store.Acquired, Token: token, Fingerprint: fp}, nil
}

// found reports the live entry e that Begin found.
func found(e entry) (store.BeginResult, error) {
	if e.enc == nil {
		return store.BeginResult{State: store.InFlight, Fingerprint: e.fp}, nil
	}
	rec, err := decode(e.enc)
	if err != nil {
		return store.BeginResult{}, err
	}
	return store.BeginResult{State: store.Completed, Fingerprint: rec.Fingerprint, Record: rec}, nil
}

// Extend renews the lease of token on key.
func (s *Store) Extend(_ context.Context, key, token string, lease time.Duration) error {
	sh := s.shard(key)
	now := s.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := s.owned(sh, key, token, now)
	if !ok {
		return fmt.Errorf("memory extend: %w", store.ErrLockLost)
	}
	e.expires = now.Add(lease).UnixNano()
	sh.m[key] = e
	return nil
}

// Complete replaces the lease of token on key with rec, kept for ttl. A
// record that does not fit fails with store.ErrFull and leaves the lease.
// Completing again with the same token and the same record succeeds: that
// is a retry whose first attempt's answer was lost.
func (s *Store) Complete(_ context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	// Encode before taking the lock: the shard's other keys need not wait.
	// The key is kept in front of the encoding, in the same allocation, and
	// the map's key is made to point at it (a map assignment stores the key
	// it is given): the entry costs the collector one object, not three.
	buf := make([]byte, len(key), len(key)+store.EncodedSize(rec))
	copy(buf, key)
	buf = store.AppendRecord(buf, rec)
	key, enc := unsafe.String(unsafe.SliceData(buf), len(key)), buf[len(key):]
	size := int64(len(buf)) + entryOverhead
	sh := s.shard(key)
	now := s.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, err := s.completable(sh, key, token, enc, now)
	if err != nil || e.enc != nil {
		return err
	}
	if s.evict != nil && s.wouldOverflow(size-e.size) {
		// Evict without the lock (eviction takes other shards' locks),
		// then look again: the lease may have changed meanwhile.
		sh.mu.Unlock()
		s.makeRoom(size - e.size)
		sh.mu.Lock()
		if e, err = s.completable(sh, key, token, enc, now); err != nil || e.enc != nil {
			return err
		}
	}
	if s.wouldOverflow(size - e.size) {
		return s.fullError("complete")
	}
	s.used.Add(size - e.size)
	s.records.Add(1)
	ne := entry{enc: enc, fp: rec.Fingerprint, expires: now.Add(ttl).UnixNano(), size: size, token: e.token}
	if s.evict != nil {
		// The queue may outlive the record (see evictQueue): it keeps a
		// copy of the key, not the record's allocation.
		ne.seq = s.evict.push(strings.Clone(key), now.UnixNano(), ne.expires)
	}
	sh.m[key] = ne
	return nil
}

// completable returns the lease of token on key, or the record a previous
// Complete of token stored when it encodes to enc (the caller then has
// nothing to do), or ErrLockLost. sh.mu must be held.
func (s *Store) completable(sh *shard, key, token string, enc []byte, now time.Time) (entry, error) {
	e, ok := s.live(sh, key, now)
	switch {
	case ok && e.enc != nil && e.ownedBy(token) && bytes.Equal(e.enc, enc):
		return e, nil
	case !ok || e.enc != nil || !e.ownedBy(token):
		return entry{}, fmt.Errorf("memory complete: %w", store.ErrLockLost)
	}
	return e, nil
}

// Release deletes the lease of token on key; it does nothing when token does
// not own key.
func (s *Store) Release(_ context.Context, key, token string) error {
	sh := s.shard(key)
	now := s.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e, ok := s.owned(sh, key, token, now); ok {
		s.remove(sh, key, e)
	}
	return nil
}

// decode decodes a stored record; the record's body aliases enc.
func decode(enc []byte) (*store.Record, error) {
	rec, err := store.DecodeRecord(enc)
	if err != nil {
		return nil, fmt.Errorf("memory store: %w", err)
	}
	return rec, nil
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

func (s *Store) shard(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)%shardCount]
}

// live returns the unexpired entry under key, removing an expired one.
// sh.mu must be held.
func (s *Store) live(sh *shard, key string, now time.Time) (entry, bool) {
	e, ok := sh.m[key]
	if !ok {
		return entry{}, false
	}
	if now.UnixNano() >= e.expires {
		s.remove(sh, key, e)
		return entry{}, false
	}
	return e, true
}

// owned returns the live lease under key if token owns it. sh.mu must be held.
func (s *Store) owned(sh *shard, key, token string, now time.Time) (entry, bool) {
	e, ok := s.live(sh, key, now)
	if !ok || e.enc != nil || !e.ownedBy(token) {
		return entry{}, false
	}
	return e, true
}

// remove deletes e, the entry under key. sh.mu must be held.
func (s *Store) remove(sh *shard, key string, e entry) {
	delete(sh.m, key)
	s.used.Add(-e.size)
	if e.enc != nil {
		s.records.Add(-1)
	}
}

func (s *Store) wouldOverflow(delta int64) bool {
	return s.maxBytes > 0 && s.used.Load()+delta > s.maxBytes
}

func (s *Store) fullError(op string) error {
	return fmt.Errorf("memory %s: at %d of %d bytes: %w", op, s.used.Load(), s.maxBytes, store.ErrFull)
}

// ownedBy reports whether token is the token of e's lease.
func (e *entry) ownedBy(token string) bool { return string(e.token[:]) == token }

// tokenLen is the length of a token: 128 random bits, hex-encoded.
const tokenLen = 32

// newToken returns 128 random bits, hex-encoded.
func newToken() string {
	var b [tokenLen / 2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
