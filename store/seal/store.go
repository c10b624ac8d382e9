package seal

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Store seals the records it passes to the store it wraps and opens the
// ones it gets back. Without a keyring it seals nothing, and a sealed
// record it finds is unreadable (store.ErrKeyUnknown): turning encryption
// off never replays an empty response. Records in clear (stored before
// encryption was turned on) are returned as they are.
type Store struct {
	next store.Store
	keys atomic.Pointer[Keyring]

	// pending holds the sealed form of completions that failed with the
	// outcome unknown, by owner token, so that a retry of the same
	// completion stores the same bytes: the store then recognises its own
	// earlier success instead of reporting a lost lease.
	mu      sync.Mutex
	pending map[string]pendingSeal
}

type pendingSeal struct {
	key string
	// clear is a digest of the caller's record in clear: a retry must
	// bring the same record. The record itself is not kept, so an
	// abandoned completion does not pin its response (or the request
	// that made it) until the entry is swept.
	clear  [sha256.Size]byte
	sealed *store.Record
	at     time.Time
}

// Bounds of Store.pending: a completion retried after longer than
// pendingAge is sealed again, and so is any beyond maxPending (at worst a
// retry whose first attempt did land is then reported as a lost lease).
const (
	maxPending = 4096
	pendingAge = time.Minute
)

var _ store.Store = (*Store)(nil)

// New wraps next. kr may be nil: encryption off.
func New(next store.Store, kr *Keyring) *Store {
	s := &Store{next: next, pending: map[string]pendingSeal{}}
	s.keys.Store(kr)
	return s
}

// SetKeyring replaces the keyring, for records sealed and opened from now
// on (a reload). nil turns sealing off.
func (s *Store) SetKeyring(kr *Keyring) { s.keys.Store(kr) }

// Keyring is the keyring in use, nil when encryption is off.
func (s *Store) Keyring() *Keyring { return s.keys.Load() }

// Begin is the wrapped store's Begin, with a completed record opened. A
// record that does not open is an error wrapping store.ErrUnreadable.
func (s *Store) Begin(ctx context.Context, key string, l store.Lease, ttl time.Duration) (store.BeginResult, error) {
	res, err := s.next.Begin(ctx, key, l, ttl)
	if err != nil || res.State != store.Completed || res.Record.Sealed == nil {
		return res, err
	}
	rec, err := s.keys.Load().open(key, res.Record)
	if err != nil {
		return store.BeginResult{}, err
	}
	res.Record = rec
	return res, nil
}

// Complete seals rec and completes the key with it.
func (s *Store) Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	kr := s.keys.Load()
	if kr == nil || rec.Sealed != nil {
		return s.next.Complete(ctx, key, token, rec, ttl)
	}
	sealed := s.retried(key, token, rec)
	if sealed == nil {
		sealed = kr.seal(key, rec)
	}
	sealed.Tombstone = rec.Tombstone
	err := s.next.Complete(ctx, key, token, sealed, ttl)
	if err != nil && !errors.Is(err, store.ErrLockLost) && !errors.Is(err, store.ErrFull) {
		s.remember(token, pendingSeal{key: key, clear: digest(rec), sealed: sealed, at: time.Now()})
	}
	return err
}

// retried returns the sealed form of an earlier attempt at this very
// completion, and forgets it.
func (s *Store) retried(key, token string, rec *store.Record) *store.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return nil
	}
	p, ok := s.pending[token]
	delete(s.pending, token)
	if !ok || p.key != key || p.clear != digest(rec) {
		return nil
	}
	return p.sealed
}

// digest identifies rec by its encoding, which is deterministic.
func digest(rec *store.Record) [sha256.Size]byte {
	return sha256.Sum256(store.AppendRecord(make([]byte, 0, store.EncodedSize(rec)), rec))
}

func (s *Store) remember(token string, p pendingSeal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) >= maxPending {
		for t, old := range s.pending {
			if p.at.Sub(old.at) > pendingAge {
				delete(s.pending, t)
			}
		}
		if len(s.pending) >= maxPending {
			return
		}
	}
	s.pending[token] = p
}

// Inspect is the wrapped store's Inspect, with the record opened (see
// open).
func (s *Store) Inspect(ctx context.Context, key string) (store.Entry, error) {
	e, err := s.next.Inspect(ctx, key)
	if err != nil {
		return e, err
	}
	s.openEntry(&e, true)
	return e, nil
}

// List is the wrapped store's List, with each record opened (see open);
// listed records carry no body.
func (s *Store) List(ctx context.Context, state store.State, cursor string, limit int) ([]store.Entry, string, error) {
	entries, next, err := s.next.List(ctx, state, cursor, limit)
	for i := range entries {
		s.openEntry(&entries[i], false)
	}
	return entries, next, err
}

// openEntry opens e's record for an operator. A record that does not open
// stays as the store has it — status, sizes and times, no header or body
// — with the reason in e.Unreadable.
func (s *Store) openEntry(e *store.Entry, withBody bool) {
	if e.Record == nil || e.Record.Sealed == nil {
		return
	}
	e.SealedBy, e.BodyBytes = e.Record.Sealed.KeyID, e.Record.Sealed.BodyBytes
	rec, err := s.keys.Load().open(e.Key, e.Record)
	if err != nil {
		e.Unreadable = err
		return
	}
	if !withBody {
		rec.Body = nil
	}
	e.Record = rec
}

// Extend, Release, Delete, Ping, Health and Close are the wrapped store's.

func (s *Store) Extend(ctx context.Context, key, token string, lease time.Duration) error {
	return s.next.Extend(ctx, key, token, lease)
}

func (s *Store) Release(ctx context.Context, key, token string) error {
	return s.next.Release(ctx, key, token)
}

func (s *Store) Delete(ctx context.Context, key string) error { return s.next.Delete(ctx, key) }
func (s *Store) Ping(ctx context.Context) error               { return s.next.Ping(ctx) }
func (s *Store) Close() error                                 { return s.next.Close() }

func (s *Store) Health(ctx context.Context) (store.Health, error) { return s.next.Health(ctx) }
