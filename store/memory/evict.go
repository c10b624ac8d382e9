package memory

import (
	"sync"
	"sync/atomic"
)

// evictQueue lists completed records in completion order, for EvictOldest.
// Items are not removed when their record goes away otherwise (expiry,
// Delete): an eviction skips an item whose key no longer holds a record of
// the same seq, and push drops expired items at the front. With one TTL for
// all records (the usual case) the queue then holds about as many items as
// the store holds records.
type evictQueue struct {
	mu        sync.Mutex
	items     []evictItem
	head      int
	seq       uint64
	evictions atomic.Uint64
}

type evictItem struct {
	key     string
	seq     uint64
	expires int64 // Unix nanoseconds, as the record's entry
}

// push appends key and returns its sequence number, never 0. It first
// drops the expired items at the front.
func (q *evictQueue) push(key string, now, expires int64) uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.head < len(q.items) && q.items[q.head].expires <= now {
		q.items[q.head] = evictItem{}
		q.head++
	}
	q.compact()
	q.seq++
	q.items = append(q.items, evictItem{key: key, seq: q.seq, expires: expires})
	return q.seq
}

// pop removes and returns the oldest item whose expiry has not passed.
func (q *evictQueue) pop(now int64) (evictItem, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.head < len(q.items) {
		it := q.items[q.head]
		q.items[q.head] = evictItem{}
		q.head++
		if now < it.expires {
			q.compact()
			return it, true
		}
	}
	q.compact()
	return evictItem{}, false
}

// compact releases the consumed front of items once it is half of them.
func (q *evictQueue) compact() {
	if q.head > 1024 && q.head*2 > len(q.items) {
		q.items = append(q.items[:0:0], q.items[q.head:]...)
		q.head = 0
	}
}

// makeRoom evicts the oldest completed records until delta more bytes fit
// or there is nothing left to evict. It holds at most one shard lock at a
// time, and none when called: callers take their own shard's lock after it.
func (s *Store) makeRoom(delta int64) {
	if s.evict == nil {
		return
	}
	for s.wouldOverflow(delta) {
		now := s.now().UnixNano()
		it, ok := s.evict.pop(now)
		if !ok {
			return
		}
		h, sh := s.locate(it.key)
		sh.mu.Lock()
		if i, e := sh.t.find(h, it.key); e != nil && e.record && e.seq == it.seq {
			s.remove(sh, i)
			s.evict.evictions.Add(1)
		}
		sh.mu.Unlock()
	}
}
