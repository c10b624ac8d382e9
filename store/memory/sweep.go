package memory

import (
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// sweepLoop visits one shard per tick until Close.
func (s *Store) sweepLoop(interval time.Duration) {
	defer close(s.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	next := 0
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.sweepShard(next)
		next = (next + 1) % shardCount
	}
}

// sweepShard reclaims expired entries of shard i, examining at most
// sweepBudget entries so the shard lock is held briefly. Each visit starts
// where the last one stopped, so successive visits cover every entry.
func (s *Store) sweepShard(i int) int {
	sh := &s.shards[i]
	now := s.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return s.sweep(sh, now, sweepBudget)
}

// sweep removes expired entries among at most budget slots of sh and
// returns how many it removed. sh.mu must be held.
func (s *Store) sweep(sh *shard, now time.Time, budget int) int {
	t := &sh.t
	removed := 0
	for range min(budget, len(t.slots)) {
		if t.sweepAt >= len(t.slots) {
			t.sweepAt = 0
		}
		i := int32(t.sweepAt)
		t.sweepAt++
		if t.slots[i].used && now.UnixNano() >= t.slots[i].e.expires {
			s.remove(sh, i)
			removed++
		}
	}
	return removed
}

// recordSize approximates the memory held by a completed entry.
func recordSize(key string, rec *store.Record) int64 {
	return int64(len(key)+store.EncodedSize(rec)) + entryOverhead
}
