package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Replicas that cache completed records (cache.go) keep the promise that
// a deleted record is never replayed, on any replica, once its DELETE
// returned. Two tables beside the records' own, made by Prepare, carry it:
//
//	<table>_deletions   seq bigserial, key, at: every deletion of a live
//	                    completed record, written in the transaction that
//	                    deletes it
//	<table>_replicas    id, acked, expires_at: each replica that caches,
//	                    the highest seq it applied, and its lease
//
// A replica with a cache registers, and every cachePoll it reads the
// deletions after the last it applied — one indexed read, a write only
// when it has something to acknowledge or its lease to renew — drops
// their keys from its cache, then acknowledges them, renewing its lease
// (a renewal always follows a read, so a live replica is never behind).
// A Delete of a completed record waits until every live registration
// acknowledged its seq, or its lease ran out in the database; an expired
// registration is deleted by the Delete that stops waiting for it, so
// that its replica, whose next renewal then finds nothing, empties its
// cache before it serves from it again.
//
// Deletions take their seq and commit under one advisory lock, so seqs
// commit in order: a replica that read seq n has read every deletion
// before it, and its "highest applied" covers them all.
type logStatements struct {
	deletions, replicas string // quoted names
	create, lock        string
	deleteLogged        string
	awaitAcks           string
	register, renew     string
	poll, deregister    string
	trimDeletions       string
	trimReplicas        string
}

const (
	// defaultCacheLease is a registration's lease: a Delete waits at most
	// about this long for a replica cut off from the database.
	defaultCacheLease = 2 * time.Second
	// defaultCachePoll is the pause between two reads of the deletions:
	// about what a Delete waits for the live replicas.
	defaultCachePoll = 50 * time.Millisecond
	// pollLimit bounds the deletions one read returns.
	pollLimit = 1000
	// deletionsKept is how long a deletion stays in its table: far longer
	// than a live replica can be behind it.
	deletionsKept = 10 * time.Minute
)

// newLogStatements are the statements on the tables beside table (as
// configured, unquoted).
func newLogStatements(table string) logStatements {
	d, r := quoteTable(table+"_deletions"), quoteTable(table+"_replicas")
	t := quoteTable(table)
	ms := func(n int) string {
		return fmt.Sprintf("statement_timestamp() + $%d * interval '1 millisecond'", n)
	}
	return logStatements{
		deletions: d,
		replicas:  r,
		create: `CREATE TABLE IF NOT EXISTS ` + d + ` (
				seq bigserial PRIMARY KEY,
				key text NOT NULL,
				at timestamptz NOT NULL DEFAULT now());
			CREATE TABLE IF NOT EXISTS ` + r + ` (
				id text PRIMARY KEY,
				acked bigint NOT NULL,
				expires_at timestamptz NOT NULL)`,
		lock: `SELECT pg_advisory_xact_lock($1)`,
		// The deletion is logged only for a live record: a lease is never
		// cached.
		deleteLogged: `WITH d AS (
				DELETE FROM ` + t + ` WHERE key = $1 AND expires_at > now() RETURNING head IS NOT NULL AS done
			), logged AS (
				INSERT INTO ` + d + ` (key) SELECT $1 FROM d WHERE done RETURNING seq
			)
			SELECT (SELECT count(*) FROM d), coalesce((SELECT seq FROM logged), 0)`,
		// A registration whose lease ended is deleted, not just passed
		// over: a renewal racing this statement either revives it first
		// (then it is waited for) or finds it gone.
		awaitAcks: `WITH gone AS (
				DELETE FROM ` + r + ` WHERE acked < $1 AND expires_at <= statement_timestamp() RETURNING id
			)
			SELECT count(*) FROM ` + r + ` WHERE acked < $1 AND id <> $2 AND id NOT IN (SELECT id FROM gone)`,
		register: `INSERT INTO ` + r + ` (id, acked, expires_at)
			SELECT $1, coalesce(max(seq), 0), ` + ms(2) + ` FROM ` + d + ` RETURNING acked`,
		renew: `UPDATE ` + r + ` SET acked = $2, expires_at = ` + ms(3) + `
			WHERE id = $1 AND expires_at > statement_timestamp()`,
		poll:          `SELECT seq, key FROM ` + d + ` WHERE seq > $1 ORDER BY seq LIMIT $2`,
		deregister:    `DELETE FROM ` + r + ` WHERE id = $1`,
		trimDeletions: `DELETE FROM ` + d + ` WHERE at < now() - $1 * interval '1 millisecond'`,
		trimReplicas:  `DELETE FROM ` + r + ` WHERE expires_at <= now()`,
	}
}

// logLockKey is the advisory lock deletions take their seq under.
func logLockKey(table string) int64 {
	h := fnv.New64a()
	h.Write([]byte("idempotency-proxy deletions " + table))
	return int64(h.Sum64())
}

// createLog makes the deletions and replicas tables when missing. Every
// replica needs them, with or without a cache of its own: its Delete
// logs what the others' caches must drop. An earlier version's replicas
// never look at them.
func (s *Store) createLog(ctx context.Context) error {
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL`,
		s.sql.log.deletions, s.sql.log.replicas).Scan(&ok)
	if err != nil || ok {
		return s.translate("table lookup", err)
	}
	h := fnv.New64a()
	h.Write([]byte("idempotency-proxy table " + s.table))
	lock := fmt.Sprintf("SELECT pg_advisory_xact_lock(%d)", int64(h.Sum64()))
	err = s.inTx(ctx, append([]string{lock}, strings.Split(s.sql.log.create, ";")...)...)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42501": // insufficient_privilege
		return fmt.Errorf("postgres tables %s and %s, which replicas use to drop deleted records from their caches, "+
			"cannot be created: have the database's owner run %s: %v", s.sql.log.deletions, s.sql.log.replicas,
			strings.Join(strings.Fields(s.sql.log.create), " "), err)
	case err != nil:
		return s.translate("create tables", err)
	}
	s.log.Info("postgres tables created", "tables", s.table+"_deletions, "+s.table+"_replicas")
	return nil
}

// deleteLogged deletes key's live row, logging the deletion of a
// record, and returns its seq (0 for a lease) and whether there was one.
func (s *Store) deleteLogged(ctx context.Context, key string) (seq int64, found bool, err error) {
	b := &pgx.Batch{}
	b.Queue(s.sql.log.lock, s.logLock)
	b.Queue(s.sql.log.deleteLogged, key)
	br := s.pool.SendBatch(ctx, b)
	var n int64
	_, err = br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&n, &seq)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return seq, n > 0, err
}

// awaitAcks waits until every live registration but this replica's own
// (its cache dropped the key already) acknowledged seq. A live replica
// acknowledges within a read of the deletions; one cut off stops being
// live when its lease runs out, so the wait is bounded by the lease.
func (s *Store) awaitAcks(ctx context.Context, seq int64) error {
	ctx, cancel := context.WithTimeout(ctx, s.cacheLease+2*s.timeout)
	defer cancel()
	self := ""
	if id := s.replicaID.Load(); id != nil {
		self = *id
	}
	pause := time.NewTimer(0)
	defer pause.Stop()
	var err error
	for {
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return fmt.Errorf("postgres delete: %w: deleted, but replicas' caches may replay the record until their leases end (%s): %w",
				store.ErrUnavailable, s.cacheLease, err)
		case <-pause.C:
		}
		var waiting int64
		if err = s.pool.QueryRow(ctx, s.sql.log.awaitAcks, seq, self).Scan(&waiting); err == nil && waiting == 0 {
			return nil
		}
		pause.Reset(s.cachePoll / 5)
	}
}

// replica is this replica's registration (Store.rep).
type replica struct {
	id        string // "" while not registered
	acked     int64
	renewedAt time.Time // when the last successful renewal was sent
}

// pollLoop keeps this replica's registration and its cache up to date
// until the store closes.
func (s *Store) pollLoop() {
	defer s.bg.Done()
	t := time.NewTicker(s.cachePoll)
	defer t.Stop()
	for {
		if s.prepared.Load() {
			s.poll()
		}
		select {
		case <-s.stop:
			s.repMu.Lock()
			if s.rep.id != "" {
				s.deregister(s.rep.id)
			}
			s.repMu.Unlock()
			return
		case <-t.C:
		}
	}
}

// poll registers, or reads the deletions, applies and acknowledges them
// and renews the lease when it is due. Prepare calls it too, so that a
// replica serves from its cache from its first request.
func (s *Store) poll() {
	s.repMu.Lock()
	defer s.repMu.Unlock()
	r := &s.rep
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	if r.id == "" {
		s.register(ctx, r)
		return
	}
	rows, err := s.pool.Query(ctx, s.sql.log.poll, r.acked, pollLimit)
	var keys []string
	last := r.acked
	if err == nil {
		var seq int64
		var key string
		_, err = pgx.ForEachRow(rows, []any{&seq, &key}, func() error {
			keys, last = append(keys, key), seq
			return nil
		})
	}
	if err != nil {
		s.log.Debug("postgres deletions not read; the cache stops serving when its lease ends", "error", s.translate("poll", err).Error())
		return
	}
	if len(keys) > 0 {
		s.cache.invalidate(keys...)
		r.acked = last
	} else if time.Since(r.renewedAt) < s.cacheLease/4 {
		return
	}
	s.renew(ctx, r)
}

// register inserts a registration with a new id, acknowledging every
// deletion committed so far, and empties the cache: it serves from then
// on, until the lease's local end.
func (s *Store) register(ctx context.Context, r *replica) {
	id := newToken()
	sent := time.Now()
	var acked int64
	if err := s.pool.QueryRow(ctx, s.sql.log.register, id, s.cacheLease.Milliseconds()).Scan(&acked); err != nil {
		s.log.Debug("postgres cache not registered; replays are read from the database", "error", s.translate("register", err).Error())
		return
	}
	r.id, r.acked, r.renewedAt = id, acked, sent
	s.replicaID.Store(&id)
	s.cache.reset(s.servingUntil(sent))
}

// renew acknowledges r.acked and renews the lease. A registration gone
// or expired in the database is over: deletions may have stopped waiting
// for it, so the cache is emptied and the replica registers anew.
func (s *Store) renew(ctx context.Context, r *replica) {
	sent := time.Now()
	tag, err := s.pool.Exec(ctx, s.sql.log.renew, r.id, r.acked, s.cacheLease.Milliseconds())
	if err != nil {
		s.log.Debug("postgres cache lease not renewed; the cache stops serving when it ends", "error", s.translate("renew", err).Error())
		return
	}
	if tag.RowsAffected() == 0 {
		s.cache.reset(time.Time{})
		s.replicaID.Store(nil)
		r.id = ""
		s.log.Info("postgres cache lease lost: the cache was emptied and registers again")
		return
	}
	r.renewedAt = sent
	s.cache.setDeadline(s.servingUntil(sent))
}

// servingUntil is the local end of a lease whose renewal was sent at
// sent: the database ends it later, at the renewal's own time plus the
// lease, so a margin of a tenth covers the clocks' rates.
func (s *Store) servingUntil(sent time.Time) time.Time {
	return sent.Add(s.cacheLease - s.cacheLease/10)
}

// deregister withdraws the registration, so that no Delete waits for a
// replica that closed.
func (s *Store) deregister(id string) {
	s.cache.reset(time.Time{})
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	if _, err := s.pool.Exec(ctx, s.sql.log.deregister, id); err != nil {
		s.log.Debug("postgres cache registration not withdrawn; it ends with its lease", "error", s.translate("deregister", err).Error())
	}
}

// trimLog deletes deletions kept long enough and registrations whose
// lease ended.
func (s *Store) trimLog() {
	ctx, cancel := context.WithTimeout(context.Background(), sweepTimeout)
	defer cancel()
	for _, q := range []string{s.sql.log.trimDeletions, s.sql.log.trimReplicas} {
		var args []any
		if q == s.sql.log.trimDeletions {
			args = []any{deletionsKept.Milliseconds()}
		}
		if _, err := s.pool.Exec(ctx, q, args...); err != nil {
			s.log.Debug("postgres trim of deletions failed; retried at the next sweep", "table", s.table, "error", s.translate("trim", err).Error())
			return
		}
	}
}
