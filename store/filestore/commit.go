package filestore

import (
	"context"
	"fmt"
	"runtime"

	bolt "go.etcd.io/bbolt"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// maxBatch bounds the writes committed in one transaction.
const maxBatch = 512

// indexFill is how full bbolt fills the expiry index's pages when it
// splits them.
const indexFill = 0.95

// op is one write waiting for the committer. fn runs inside the batch's
// transaction and returns the write's own outcome (ErrLockLost, ErrFull);
// done receives that, or the commit's error when the transaction failed.
type op struct {
	fn   func(t *txn) error
	done chan error
}

// txn is a write transaction shared by a batch of ops, with the changes to
// the counters they made. An op that fails leaves no change behind, except
// evictions and sweeping it did to make room, which stand on their own.
type txn struct {
	s       *Store
	keys    *bolt.Bucket
	expiry  *bolt.Bucket
	now     int64
	used    int64 // the store's used bytes with this transaction's changes
	records int64
	evicted uint64
	// changes are the keys written or deleted, in order, for recent.
	changes []change
}

// write queues fn for the next commit and waits for its outcome. A caller
// whose context ends first gets ErrUnavailable: the write may still be
// committed, as a store that timed out may still have written.
func (s *Store) write(ctx context.Context, name string, fn func(t *txn) error) error {
	o := &op{fn: fn, done: make(chan error, 1)}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return fmt.Errorf("file %s: store closed: %w", name, store.ErrUnavailable)
	}
	select {
	case s.ops <- o:
	case <-ctx.Done():
		s.mu.RUnlock()
		return fmt.Errorf("file %s: %w: %w", name, store.ErrUnavailable, ctx.Err())
	}
	s.mu.RUnlock()
	select {
	case err := <-o.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("file %s: %w: %w", name, store.ErrUnavailable, ctx.Err())
	}
}

// commitLoop commits batches until ops is closed: each batch is every op
// that queued while the previous commit ran, so concurrent writes share a
// commit (and its fsync) without waiting for a timer.
//
// Woken by a first op, the committer yields once (runtime.Gosched) before
// taking what has queued, as the Redis store's batcher does: the
// goroutines that were ready to run — requests about to queue their own
// write — get their turn first. Without it, a process with one CPU
// (GOMAXPROCS=1, a sidecar's case) runs the committer as soon as the
// first writer blocks, and commits one write at a time: a commit's cost
// (bbolt writes every page it touched, its free list and a meta page)
// is then paid by every write instead of shared. A lone writer is
// committed at once; no timer holds anyone back.
func (s *Store) commitLoop() {
	defer close(s.committed)
	batch := make([]*op, 0, maxBatch)
	errs := make([]error, 0, maxBatch)
	for o := range s.ops {
		batch = append(batch[:0], o)
		runtime.Gosched()
	fill:
		for len(batch) < maxBatch {
			select {
			case o, ok := <-s.ops:
				if !ok {
					break fill
				}
				batch = append(batch, o)
			default:
				break fill
			}
		}
		errs = s.commit(batch, errs[:0])
		for i, o := range batch {
			o.done <- errs[i]
			batch[i] = nil
		}
	}
}

// commit runs batch in one transaction and returns each op's outcome.
func (s *Store) commit(batch []*op, errs []error) []error {
	t := &txn{s: s, now: s.now().UnixNano(), used: s.used.Load(), records: s.records.Load()}
	err := s.safely(func() error {
		return s.db.Update(func(tx *bolt.Tx) error {
			t.keys, t.expiry = tx.Bucket(bucketKeys), tx.Bucket(bucketExpiry)
			// Index entries are added in about the order of their times, at
			// the right of the tree: bbolt's default of half-full pages would
			// leave every page of the index half empty.
			t.expiry.FillPercent = indexFill
			for _, o := range batch {
				errs = append(errs, o.fn(t))
			}
			return writeMeta(tx.Bucket(bucketMeta), meta{t.used, t.records})
		})
	})
	// Before any op of the batch is answered: a Delete's caller then
	// finds the record gone from memory too.
	s.recent.apply(t.changes, err == nil)
	if err != nil {
		err = s.commitError(err)
		for i := range errs {
			errs[i] = err
		}
		for len(errs) < len(batch) {
			errs = append(errs, err)
		}
		return errs
	}
	s.used.Store(t.used)
	s.records.Store(t.records)
	s.evictions.Add(t.evicted)
	return errs
}

// commitError translates a failed commit: a disk without space is a full
// store (the caller keeps its lease and tries again, as for MaxBytes); a
// damaged file is store.ErrCorrupt (damaged.go); anything else is an
// unavailable store.
func (s *Store) commitError(err error) error {
	if isDamaged(err) {
		return fmt.Errorf("file store %s: commit: %w", s.dir, err)
	}
	if noSpace(err) {
		s.releaseReserve()
		return fmt.Errorf("file store %s: commit: %w: %w", s.dir, store.ErrFull, err)
	}
	return fmt.Errorf("file store %s: commit: %w: %w", s.dir, store.ErrUnavailable, err)
}
