package postgres

import (
	"context"
	"time"
)

const (
	// defaultSweepInterval is the pause between two sweeps. Expired rows
	// are invisible at once; the sweep only gives their space back.
	defaultSweepInterval = 10 * time.Second
	// sweepBatch bounds the rows one statement deletes, and so how long it
	// holds their locks and how much WAL it writes at once.
	sweepBatch = 1000
	// sweepBatches bounds the statements of one sweep: a backlog is worked
	// off over several sweeps rather than in one long burst.
	sweepBatches = 100
	// sweepTimeout bounds one batch.
	sweepTimeout = 5 * time.Second
)

func (s *Store) sweepLoop(interval time.Duration) {
	defer s.bg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sweep()
			if s.prepared.Load() {
				s.trimLog()
			}
		}
	}
}

// sweep deletes expired rows in batches until a batch finds fewer than
// sweepBatch, the store closes, or sweepBatches have run. It returns the
// rows deleted.
func (s *Store) sweep() int64 {
	var total int64
	for range sweepBatches {
		select {
		case <-s.stop:
			return total
		default:
		}
		n, err := s.sweepOnce()
		total += n
		if err != nil {
			s.log.Debug("postgres sweep of expired keys failed; retried at the next sweep", "table", s.table, "error", err)
			return total
		}
		if n < sweepBatch {
			return total
		}
	}
	return total
}

func (s *Store) sweepOnce() (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), sweepTimeout)
	defer cancel()
	if !s.prepared.Load() {
		return 0, nil // nothing to sweep in a table not known to be ours
	}
	tag, err := s.pool.Exec(ctx, s.sql.sweep, sweepBatch)
	if err != nil {
		return 0, s.translate("sweep", err)
	}
	return tag.RowsAffected(), nil
}
