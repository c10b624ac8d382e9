package memory

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Inspect returns the lease or record under key, or store.ErrNotFound.
func (s *Store) Inspect(_ context.Context, key string) (store.Entry, error) {
	h, sh := s.locate(key)
	sh.mu.Lock()
	_, live := s.live(sh, h, key, s.now())
	if live == nil {
		sh.mu.Unlock()
		return store.Entry{}, fmt.Errorf("memory inspect: %w", store.ErrNotFound)
	}
	e := *live
	enc := sh.t.enc(&e)
	sh.mu.Unlock()
	return toEntry(key, &e, enc, true)
}

// Delete removes the lease or record under key, or returns
// store.ErrNotFound. The owner of a deleted lease then gets
// store.ErrLockLost from Extend and Complete.
func (s *Store) Delete(_ context.Context, key string) error {
	h, sh := s.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, e := s.live(sh, h, key, s.now())
	if e == nil {
		return fmt.Errorf("memory delete: %w", store.ErrNotFound)
	}
	s.remove(sh, i)
	return nil
}

// List returns up to limit entries in state (0 for all) from cursor on
// ("" to start), and the cursor of the next page ("" when done). Keys are
// visited shard by shard in sorted order, so an entry present for the
// whole listing is returned exactly once. A cursor is valid only within
// the process that returned it (shards depend on a per-process seed).
// Listed records carry no Body.
func (s *Store) List(_ context.Context, state store.State, cursor string, limit int) ([]store.Entry, string, error) {
	if limit <= 0 {
		return nil, "", errors.New("memory list: limit must be positive")
	}
	first, after, err := parseCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	var out []store.Entry
	now := s.now()
	for i := first; i < shardCount; i++ {
		sh := &s.shards[i]
		sh.mu.Lock()
		t := &sh.t
		var slots []int32
		for j := range t.slots {
			if t.slots[j].used && t.key(&t.slots[j].e) > after {
				slots = append(slots, int32(j))
			}
		}
		slices.SortFunc(slots, func(a, b int32) int {
			return strings.Compare(t.key(&t.slots[a].e), t.key(&t.slots[b].e))
		})
		type listed struct {
			key string
			e   entry
			enc []byte
		}
		var found []listed
		for _, j := range slots {
			e := t.slots[j].e
			if now.UnixNano() >= e.expires || !state.Lists(e.record) {
				continue
			}
			// Keys are copied: the listing must not keep slabs alive.
			found = append(found, listed{strings.Clone(t.key(&e)), e, t.enc(&e)})
			if len(out)+len(found) == limit {
				break
			}
		}
		sh.mu.Unlock()
		for _, f := range found {
			ent, err := toEntry(f.key, &f.e, f.enc, false)
			if err != nil {
				return nil, "", err
			}
			out = append(out, ent)
		}
		if len(out) == limit {
			return out, makeCursor(i, out[len(out)-1].Key), nil
		}
		after = ""
	}
	return out, "", nil
}

// toEntry describes e, whose encoding is enc; withBody false leaves
// the record's Body nil.
func toEntry(key string, e *entry, enc []byte, withBody bool) (store.Entry, error) {
	ent := store.Entry{Key: key, State: store.InFlight, Fingerprint: e.fp}
	ent.ExpiresAt = unixNano(e.expires)
	if !e.record {
		l, err := decodeLease(enc, e.fp)
		if err != nil {
			return store.Entry{}, err
		}
		ent.Lease = l
		return ent, nil
	}
	rec, err := decode(enc)
	if err != nil {
		return store.Entry{}, err
	}
	ent.State, ent.Record, ent.BodyBytes = store.Completed, rec, rec.BodyBytes()
	if !withBody {
		rec.Body = nil
	}
	return ent, nil
}

// A cursor is the shard index and the last key listed, base64url: keys
// are opaque strings to the store.
func makeCursor(shard int, last string) string {
	return strconv.Itoa(shard) + "." + base64.RawURLEncoding.EncodeToString([]byte(last))
}

func parseCursor(c string) (int, string, error) {
	if c == "" {
		return 0, "", nil
	}
	n, k, ok := strings.Cut(c, ".")
	i, err := strconv.Atoi(n)
	last, err2 := base64.RawURLEncoding.DecodeString(k)
	if !ok || err != nil || err2 != nil || i < 0 || i >= shardCount {
		return 0, "", fmt.Errorf("memory list: malformed cursor %q", c)
	}
	return i, string(last), nil
}

// Stats are the store's figures for its gauges and counter: Bytes is
// UsedBytes, Evictions counts records dropped under EvictOldest.
type Stats = store.Stats

// Stats returns the current figures.
func (s *Store) Stats() Stats {
	st := Stats{Bytes: s.used.Load(), Records: s.records.Load()}
	if s.evict != nil {
		st.Evictions = s.evict.evictions.Load()
	}
	return st
}

// UsedBytes is the approximate size of the entries currently held,
// expired ones included until they are reclaimed.
func (s *Store) UsedBytes() int64 { return s.used.Load() }

// typicalLease is the key and description of a lease as the proxy takes
// it: a 32-digit key_hash, and about a hundred bytes of method, host, path,
// route, start and instance.
const typicalLease = 32 + 128

// Health reports the store as "memory"; it is Full when a lease for a new
// key would not fit and nothing can be evicted for it.
func (s *Store) Health(context.Context) (store.Health, error) {
	full := s.wouldOverflow(entryOverhead + typicalLease)
	if full && s.evict != nil {
		full = s.records.Load() == 0
	}
	return store.Health{Server: "memory", Full: full}, nil
}

func unixNano(n int64) time.Time { return time.Unix(0, n).UTC() }
