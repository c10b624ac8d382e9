// Package filestore is an idempotency store in a directory on the local
// disk, for a single proxy instance that must survive its own restarts: a
// sidecar container that is OOM-killed and restarted keeps its volume, and
// with it every lease and record it had acknowledged.
//
// The engine is bbolt (go.etcd.io/bbolt), a pure-Go B+tree in one
// memory-mapped file; docs/design-decisions.md has the measurements that
// chose it over Pebble. Opening it reads two meta pages and the free-page
// list, so a restart over a large directory serves its first request
// without reading, indexing or replaying what the directory holds.
//
// # Durability
//
// Every write is committed before it is acknowledged. All writes go through
// one goroutine that commits, in one transaction, every write that queued
// while the previous commit ran (group commit): concurrent requests share
// a commit and, with Options.Fsync, its fdatasync. Without Fsync a commit
// is written to the operating system (pwrite) before it is acknowledged, so
// it survives the process being killed but not the machine losing power.
//
// # One process per directory
//
// Open takes an exclusive lock (flock) on the directory's LOCK file, which
// names the holder's pid; a second process gets an error naming the
// directory and that pid, and the first is not disturbed.
//
// # Size and expiry
//
// Options.MaxBytes bounds the approximate size of the entries held, with
// the bounded stores' rules when full (see store.WhenFull): Begin on a new
// key and Complete of a record that does not fit fail with store.ErrFull,
// the lease staying in place; with EvictOldest the records nearest to
// their expiry (with one ttl, the oldest) are dropped first; a lease is
// never dropped. A disk that cannot take a commit (ENOSPC, EDQUOT) is a
// full store in the same way: the write fails with store.ErrFull and
// nothing else changes; a reserve file gives its space to the deletes and
// sweeps that follow, and new entries are refused until it can be written
// again (reserve.go). Expired entries count as absent at once; a
// background sweeper deletes them in bounded batches, in order of expiry
// through an index, so their pages return to the file's free list and are
// reused (the file does not shrink).
package filestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Default figures.
const (
	// DefaultMaxBytes bounds the entries held when Options.MaxBytes is 0.
	DefaultMaxBytes = 1 << 30
	// defaultSweepInterval is the pause between two sweeps that found
	// less than a full batch to delete.
	defaultSweepInterval = time.Second
	// dataFile is the database's name inside the directory.
	dataFile = "idempotency.db"
)

// Options configure a Store. They are the configuration's section
// store.file (see options.go).
type Options struct {
	// Path is the directory, created if missing. Required.
	Path string `config:"path" flag:"store-path" address:"yes"`
	// Fsync makes every commit durable on disk (fdatasync) before it is
	// acknowledged. Without it a commit survives the process, not the
	// machine.
	Fsync bool `config:"fsync"`
	// MaxBytes bounds the approximate size of the entries held; 0 means
	// DefaultMaxBytes. The file on disk is larger (docs/operating.md).
	MaxBytes int64 `config:"max_bytes,size"`
	// WhenFull is what a write that would exceed MaxBytes does.
	WhenFull store.WhenFull `config:"when_full"`
	// Now is the clock; nil means time.Now. Tests inject a fake clock.
	Now func() time.Time
	// SweepInterval is the pause between sweeps of expired entries; 0
	// means one second, a negative value disables the sweeper.
	SweepInterval time.Duration
}

// Store is the file store. It is safe for concurrent use.
type Store struct {
	dir      string
	db       *bolt.DB
	lock     *os.File
	now      func() time.Time
	maxBytes int64
	evict    bool

	// used, records and evictions mirror what the database holds; only
	// the committer changes them, after a commit succeeded.
	used      atomic.Int64
	records   atomic.Int64
	evictions atomic.Uint64
	// diskFull is set when a commit failed for lack of disk space, and
	// cleared when the reserve could be written again (reserve.go).
	diskFull     atomic.Bool
	reserveTried atomic.Int64 // Unix nanoseconds
	// damaged is the first damage to the file an operation met (damaged.go).
	damaged atomic.Pointer[damagedError]

	// recent answers replays of the records it holds (recent.go).
	recent recent

	// mu guards closed against sends on ops racing with Close.
	mu     sync.RWMutex
	closed bool
	ops    chan *op

	stopSweep chan struct{}
	swept     chan struct{}
	committed chan struct{}
}

// Open opens or creates the store in opts.Path and starts its committer
// and sweeper. It fails with store.ErrInUse when another process holds the
// directory.
func Open(opts Options) (*Store, error) {
	if opts.Path == "" {
		return nil, errors.New("file store: no directory given")
	}
	if err := os.MkdirAll(opts.Path, 0o700); err != nil {
		return nil, fmt.Errorf("file store: %w", err)
	}
	lock, err := lockDir(opts.Path)
	if err != nil {
		return nil, err
	}
	db, err := openDB(filepath.Join(opts.Path, dataFile), &bolt.Options{
		// The directory lock is held already: bbolt's own lock on the
		// file is not contended, and a bound keeps that so.
		Timeout: time.Second,
		NoSync:  !opts.Fsync,
		// The array free list is written sorted: committing it does not
		// sort every free page id as the hash map's does.
		FreelistType: bolt.FreelistArrayType,
	})
	if err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("file store %s: %w", opts.Path, err)
	}
	s := &Store{
		dir:       opts.Path,
		db:        db,
		lock:      lock,
		now:       opts.Now,
		maxBytes:  opts.MaxBytes,
		evict:     opts.WhenFull == store.EvictOldest,
		ops:       make(chan *op, maxBatch),
		stopSweep: make(chan struct{}),
		swept:     make(chan struct{}),
		committed: make(chan struct{}),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.maxBytes <= 0 {
		s.maxBytes = DefaultMaxBytes
	}
	if err := s.init(); err != nil {
		_ = db.Close()
		_ = lock.Close()
		return nil, fmt.Errorf("file store %s: %w", opts.Path, err)
	}
	if err := s.fillReserve(); err != nil {
		if !noSpace(err) {
			_ = db.Close()
			_ = lock.Close()
			return nil, fmt.Errorf("file store %s: reserve: %w", opts.Path, err)
		}
		// Open on a full disk: serve what is there, add nothing.
		s.diskFull.Store(true)
		s.reserveTried.Store(s.now().UnixNano())
	}
	go s.commitLoop()
	interval := opts.SweepInterval
	if interval == 0 {
		interval = defaultSweepInterval
	}
	if interval < 0 {
		close(s.swept)
	} else {
		go s.sweepLoop(interval)
	}
	return s, nil
}

// init creates the buckets on first use and reads the size counters.
func (s *Store) init() error {
	return s.safely(func() error { return s.db.Update(s.initTx) })
}

func (s *Store) initTx(tx *bolt.Tx) error {
	for _, name := range [][]byte{bucketKeys, bucketExpiry, bucketMeta} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	m := readMeta(tx.Bucket(bucketMeta))
	s.used.Store(m.used)
	s.records.Store(m.records)
	return nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Ping reports whether the store takes writes: it fails once closed, and
// once an operation found the file damaged (damaged.go).
func (s *Store) Ping(context.Context) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("file store %s: closed: %w", s.dir, store.ErrUnavailable)
	}
	return s.damage()
}

// Close stops the sweeper, commits the writes already queued, closes the
// database and releases the directory.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	select {
	case <-s.swept: // sweeper disabled
	default:
		close(s.stopSweep)
		<-s.swept
	}
	// No send can start now: the committer drains the queue and stops.
	close(s.ops)
	<-s.committed
	err := s.db.Close()
	if lerr := s.lock.Close(); err == nil {
		err = lerr
	}
	return err
}

// view runs fn in a read transaction. A database that cannot be read
// (closed, or failing) is an unavailable store; an entry that cannot be
// decoded, or a page bbolt cannot read, says so itself (store.ErrCorrupt).
func (s *Store) view(op string, fn func(tx *bolt.Tx) error) error {
	err := s.safely(func() error { return s.db.View(fn) })
	if isDamaged(err) {
		return fmt.Errorf("file %s: %w", op, err)
	}
	if err != nil && !errors.Is(err, store.ErrCorrupt) {
		return fmt.Errorf("file %s: %s: %w: %w", op, s.dir, store.ErrUnavailable, err)
	}
	return err
}

// Stats returns the figures for the store's gauges and counter, as the
// memory store's.
func (s *Store) Stats() store.Stats {
	return store.Stats{Bytes: s.used.Load(), Records: s.records.Load(), Evictions: s.evictions.Load()}
}
