package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// columns is the table's shape: each column the store uses, its type as
// format_type names it, and whether the store leaves it NULL in some rows
// (a lease has no head or body, a record no lease). A table with these
// columns and a unique key works; columns of its own an operator added are
// left alone, unless they are NOT NULL without a default: the store's
// inserts leave them empty, so every new key would fail.
var columns = []struct {
	name, typ string
	nullable  bool
}{
	{"key", "text", false},
	{"token", "text", false},
	{"fingerprint", "bytea", false},
	{"expires_at", "timestamp with time zone", false},
	{"head", "bytea", true},
	{"body", "bytea", true},
	{leaseColumn, "bytea", true},
}

// leaseColumn holds a lease's description (store.AppendLease): NULL in a
// record's row and in a lease that describes nothing. A table made by a
// version before leases were described lacks it; Prepare adds it (see
// migrate).
const leaseColumn = "lease"

// ErrTableShape means the configured table exists but is not the proxy's:
// the proxy refuses to start rather than write into someone else's table.
var ErrTableShape = errors.New("table has another shape")

// statements are the SQL texts for one table.
type statements struct {
	create, index, shape, unique, addLease        string
	begin, extend, complete, release              string
	inspect, delete, list, sweep, exists, version string
	log                                           logStatements
}

// A lease or record duration travels as milliseconds ($n), and every
// deadline is computed by the database from its own clock.
func newStatements(t string, log logStatements) statements {
	// The statements a batch sends together judge expiry by their own
	// start, statement_timestamp(), not the transaction's, now(): a
	// statement late in a batch (one that waited for a row lock before
	// it) would otherwise serve a row that expired while it waited. Alone
	// in a transaction, the two are the same time.
	ms := func(n int) string {
		return fmt.Sprintf("statement_timestamp() + $%d * interval '1 millisecond'", n)
	}
	// A record's time left, in milliseconds of the database's clock, for
	// the cache (cache.go): never its own clock against expires_at.
	msLeft := `(extract(epoch FROM expires_at - statement_timestamp()) * 1000)::bigint`
	// An index lives in its table's schema: its name is never qualified.
	index := strings.ReplaceAll(strings.Trim(t, `"`), `"."`, "_") + "_expires_at"
	return statements{
		create: `CREATE TABLE IF NOT EXISTS ` + t + ` (
			key text PRIMARY KEY,
			token text NOT NULL,
			fingerprint bytea NOT NULL,
			expires_at timestamptz NOT NULL,
			head bytea,
			body bytea,
			lease bytea)`,
		// Nullable without a default: Postgres adds it without rewriting
		// the table, holding its lock only for that moment.
		addLease: `ALTER TABLE ` + t + ` ADD COLUMN IF NOT EXISTS lease bytea`,
		index:    `CREATE INDEX IF NOT EXISTS ` + pgx.Identifier{index}.Sanitize() + ` ON ` + t + ` (expires_at)`,
		// A column is filled in by the database when it has a default, is
		// an identity or is generated.
		shape: `SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
				a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '' FROM pg_attribute a
			WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`,
		unique: `SELECT EXISTS (SELECT FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
			WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indnatts = 1 AND a.attname = 'key')`,
		exists:  `SELECT to_regclass($1) IS NOT NULL`,
		version: `SELECT current_setting('server_version')`,
		log:     log,

		// The live row, if any, is read first; the insert runs only when
		// there is none. Under a race with another Begin that committed
		// after this statement's snapshot, the insert meets that row and
		// the no-op update returns it: the statement answers in one round
		// trip whatever it finds.
		begin: `WITH cur AS (
				SELECT token, fingerprint, head, body, lease, expires_at FROM ` + t + ` WHERE key = $1 AND expires_at > statement_timestamp()
			), ins AS (
				INSERT INTO ` + t + ` AS t (key, token, fingerprint, expires_at, lease)
				SELECT $1, $2, $3, ` + ms(4) + `, $5 WHERE NOT EXISTS (SELECT FROM cur)
				ON CONFLICT (key) DO UPDATE SET
					token = CASE WHEN t.expires_at <= statement_timestamp() THEN excluded.token ELSE t.token END,
					fingerprint = CASE WHEN t.expires_at <= statement_timestamp() THEN excluded.fingerprint ELSE t.fingerprint END,
					head = CASE WHEN t.expires_at <= statement_timestamp() THEN NULL ELSE t.head END,
					body = CASE WHEN t.expires_at <= statement_timestamp() THEN NULL ELSE t.body END,
					lease = CASE WHEN t.expires_at <= statement_timestamp() THEN excluded.lease ELSE t.lease END,
					expires_at = CASE WHEN t.expires_at <= statement_timestamp() THEN excluded.expires_at ELSE t.expires_at END
				RETURNING t.token, t.fingerprint, t.head, t.body, t.lease
			)
			SELECT token, fingerprint, head, body, lease, 0::bigint FROM ins
			UNION ALL
			SELECT token, fingerprint, head, body, lease, ` + msLeft + ` FROM cur`,
		extend: `UPDATE ` + t + ` SET expires_at = ` + ms(3) + `
			WHERE key = $1 AND token = $2 AND head IS NULL AND expires_at > statement_timestamp()`,
		// A row that already holds exactly this record is this owner's
		// earlier, acknowledged-or-not completion: it succeeds again and
		// changes nothing.
		complete: `UPDATE ` + t + ` SET
				lease = NULL,
				head = CASE WHEN head IS NULL THEN $3 ELSE head END,
				body = CASE WHEN head IS NULL THEN $4 ELSE body END,
				expires_at = CASE WHEN head IS NULL THEN ` + ms(5) + ` ELSE expires_at END
			WHERE key = $1 AND token = $2 AND expires_at > statement_timestamp() AND (head IS NULL OR (head = $3 AND body = $4))`,
		release: `DELETE FROM ` + t + ` WHERE key = $1 AND token = $2 AND head IS NULL`,

		inspect: `SELECT fingerprint, expires_at, head, body, lease FROM ` + t + ` WHERE key = $1 AND expires_at > now()`,
		delete:  `DELETE FROM ` + t + ` WHERE key = $1 AND expires_at > now()`,
		// A page reads the heads (a sealed record's holds its sealed
		// body) of its first rows whose heads add up to $4 bytes at most,
		// and the first row's whatever its size; the rows after those
		// come without their head, with fits false, to say where the
		// page ends.
		list: `SELECT key, fingerprint, expires_at, CASE WHEN fits THEN head END, body_bytes, lease, fits FROM (
				SELECT key, fingerprint, expires_at, head, coalesce(octet_length(body), 0) AS body_bytes, lease,
					row_number() OVER w = 1 OR sum(coalesce(octet_length(head), 0)) OVER w <= $4 AS fits
				FROM ` + t + `
				WHERE key > $1 AND expires_at > now() AND ($2 = 0 OR ($2 = 1) = (head IS NULL))
				WINDOW w AS (ORDER BY key)
				ORDER BY key LIMIT $3) page
			ORDER BY key`,
		// SKIP LOCKED: a row a Begin is taking over, or another replica's
		// sweep is deleting, is left to them.
		sweep: `DELETE FROM ` + t + ` WHERE key IN (
				SELECT key FROM ` + t + ` WHERE expires_at <= now() ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)
			AND expires_at <= now()`,
	}
}

// Prepare creates the table and its index when missing and checks the
// shape of an existing one. A database that does not answer is an error
// wrapping store.ErrUnavailable: the proxy starts anyway and every
// operation prepares first until it succeeds. A table of another shape is
// ErrTableShape, naming the table and what differs. With a cache, Prepare
// registers it (replica.go), so that it serves from the first request.
//
// Until Prepare is called, Ping creates nothing (--check only looks); each
// operation prepares the table first until that succeeded once.
//
// ctx bounds it, not the store's timeout: creating the table may wait for
// another replica creating it, and new connections for their handshakes.
func (s *Store) Prepare(ctx context.Context) error {
	s.serving.Store(true)
	s.refused.Store(true) // the first readiness check tries the writes
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, prepareTimeout)
		defer cancel()
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	if s.cache != nil {
		s.poll() // registers: the cache serves from the first request
	}
	return nil
}

// prepareTimeout bounds Prepare when its caller sets no deadline.
const prepareTimeout = 10 * time.Second

// ready prepares the table once. An operation that finds another
// preparing it waits no longer than its own deadline: a migration may wait
// seconds for its lock (migrate), and every request would wait with it.
func (s *Store) ready(ctx context.Context) error {
	if s.prepared.Load() {
		return nil
	}
	select {
	case s.preparing <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("postgres: table %s being prepared by another operation: %w: %w", s.table, store.ErrUnavailable, ctx.Err())
	}
	defer func() { <-s.preparing }()
	if s.prepared.Load() {
		return nil
	}
	if err := s.create(ctx); err != nil {
		return err
	}
	if err := s.checkShape(ctx); errors.Is(err, errNoLeaseColumn) {
		if err := s.migrateIfDue(ctx); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if err := s.createLog(ctx); err != nil {
		return err
	}
	s.prepared.Store(true)
	return nil
}

// create runs the DDL in one transaction under an advisory lock, so that
// replicas starting together do not race on CREATE ... IF NOT EXISTS.
func (s *Store) create(ctx context.Context) error {
	exists, err := s.tableExists(ctx)
	if err != nil || exists {
		return err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return s.translate("create table", err)
	}
	defer tx.Rollback(ctx)
	h := fnv.New64a()
	h.Write([]byte("idempotency-proxy table " + s.table))
	for _, q := range []string{`SELECT pg_advisory_xact_lock($1)`, s.sql.create, s.sql.index} {
		var args []any
		if strings.HasPrefix(q, "SELECT") {
			args = []any{int64(h.Sum64())}
		}
		if _, err := tx.Exec(ctx, q, args...); err != nil {
			return s.translate("create table "+s.table, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return s.translate("create table "+s.table, err)
	}
	s.log.Info("postgres table created", "table", s.table)
	return nil
}

// A failed migration is not tried again at once: each try queues the
// table's other queries, an earlier version's replicas' among them, behind
// its ALTER TABLE for as long as it waits for its lock, and every operation
// would try while a long transaction holds the table. The pause starts at
// migrateRetryMin, so that a short lock costs little more than itself,
// and doubles up to migrateRetryMax while the lock stays held.
const (
	migrateRetryMin = time.Second
	migrateRetryMax = 30 * time.Second
)

// migrateLockTimeout is how long the migration waits for its lock before
// giving up rather than hold the table's other queries queued behind it.
const migrateLockTimeout = 2 * time.Second

// codeLockNotAvailable is the error of a statement that gave up waiting
// for its lock at lock_timeout.
const codeLockNotAvailable = "55P03"

// errNoLeaseColumn is a table of the store's shape but for the lease
// column, which versions before leases were described did not make.
var errNoLeaseColumn = errors.New("no column " + leaseColumn)

// migrateIfDue migrates the table unless the last try failed less than
// the pause since (migrateRetryMin doubling to migrateRetryMax) ago, in
// which case it gives that failure back. s.preparing is held.
func (s *Store) migrateIfDue(ctx context.Context) error {
	if s.migrateErr != nil && time.Since(s.migratedAt) < s.migrateWait {
		return s.migrateErr
	}
	err := s.migrate(ctx)
	if err == nil {
		s.migrateErr, s.migrateWait = nil, 0
		return nil
	}
	s.migrateWait = min(max(2*s.migrateWait, migrateRetryMin), migrateRetryMax)
	s.migrateErr, s.migratedAt = err, time.Now()
	s.log.Warn("postgres table not migrated: requests get on_store_error until it is", "table", s.table,
		"error", err.Error(), "retry_in", s.migrateWait.String())
	return err
}

// migrate adds the lease column to a table an earlier version made. That
// version goes on working with the table during a rolling upgrade (it
// leaves columns it does not know alone), and its leases read as
// describing nothing. lock_timeout keeps a start from queueing every
// other query on the table behind a long transaction's lock. A role that
// may not alter the table gets an error naming the statement its owner
// runs.
//
// The migration has a deadline of its own, past the lock's wait: the
// operation that finds the table unmigrated has one of a few hundred
// milliseconds, which would end before lock_timeout gives its cause.
func (s *Store) migrate(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), migrateLockTimeout+2*s.timeout)
	defer cancel()
	lockTimeout := fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", migrateLockTimeout.Milliseconds())
	err := s.inTx(ctx, lockTimeout, s.sql.addLease)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42501": // insufficient_privilege
		return fmt.Errorf("postgres table %s: %w (no column %s, where this version keeps a lease's request): "+
			"have its owner run %s: %v", s.table, ErrTableShape, leaseColumn, s.sql.addLease, err)
	case errors.As(err, &pgErr) && pgErr.Code == codeLockNotAvailable:
		return s.translate(fmt.Sprintf("add column %s to %s: waited %s for a lock on the table that another transaction holds",
			leaseColumn, s.table, migrateLockTimeout), err)
	case err != nil:
		return s.translate("add column "+leaseColumn+" to "+s.table, err)
	}
	s.log.Info("postgres table migrated", "table", s.table, "added", "column "+leaseColumn)
	return nil
}

// inTx runs stmts, in order, in one transaction and commits it; the
// first error ends it, rolled back.
func (s *Store) inTx(ctx context.Context, stmts ...string) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	for _, q := range stmts {
		if _, err := tx.Exec(ctx, q); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

func (s *Store) tableExists(ctx context.Context) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, s.sql.exists, quoteTable(s.table)).Scan(&ok)
	return ok, s.translate("table lookup", err)
}

// checkShape compares the table's columns with the store's. A table of
// that shape but for the lease column is errNoLeaseColumn.
func (s *Store) checkShape(ctx context.Context) error {
	rows, err := s.pool.Query(ctx, s.sql.shape, quoteTable(s.table))
	if err != nil {
		return s.translate("table lookup", err)
	}
	type column struct {
		typ             string
		notNull, filled bool
	}
	got := map[string]column{}
	var name string
	var c column
	_, err = pgx.ForEachRow(rows, []any{&name, &c.typ, &c.notNull, &c.filled}, func() error {
		got[name] = c
		return nil
	})
	if err != nil {
		return s.translate("table lookup", err)
	}
	var wrong []string
	_, hasLease := got[leaseColumn]
	for _, want := range columns {
		switch c, ok := got[want.name]; {
		case !ok && want.name == leaseColumn:
			// An earlier version's table: migrate adds it.
		case !ok:
			wrong = append(wrong, "no column "+want.name)
		case c.typ != want.typ:
			wrong = append(wrong, fmt.Sprintf("column %s is %s, not %s", want.name, c.typ, want.typ))
		case want.nullable && c.notNull:
			wrong = append(wrong, fmt.Sprintf("column %s is NOT NULL, and the proxy leaves it NULL", want.name))
		}
		delete(got, want.name)
	}
	for name, c := range got { // the operator's own columns
		if c.notNull && !c.filled {
			wrong = append(wrong, fmt.Sprintf("column %s is NOT NULL without a default, and the proxy's inserts leave it empty", name))
		}
	}
	if len(wrong) == 0 {
		var unique bool
		if err := s.pool.QueryRow(ctx, s.sql.unique, quoteTable(s.table)).Scan(&unique); err != nil {
			return s.translate("table lookup", err)
		}
		if !unique {
			wrong = append(wrong, "key is not its primary key")
		}
	}
	if len(wrong) > 0 {
		slices.Sort(wrong)
		return fmt.Errorf("postgres table %s: %w (%s): name another table in store.postgres.table, or drop it",
			s.table, ErrTableShape, strings.Join(wrong, ", "))
	}
	if !hasLease {
		return errNoLeaseColumn
	}
	return nil
}

// Health reports the server's version and whether the table exists yet.
func (s *Store) Health(ctx context.Context) (store.Health, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var version string
	if err := s.pool.QueryRow(ctx, s.sql.version).Scan(&version); err != nil {
		return store.Health{}, s.translate("health", err)
	}
	if v, _, ok := strings.Cut(version, " "); ok {
		version = v // "15.14 (Debian 15.14-0+deb12u1)"
	}
	exists, err := s.tableExists(ctx)
	if err != nil {
		return store.Health{}, err
	}
	h := store.Health{Server: "postgres " + version, Detail: "table " + s.table + " exists"}
	if !exists {
		h.Detail = "table " + s.table + " does not exist yet (the proxy creates it at start)"
		return h, nil
	}
	return h, s.checkShape(ctx)
}
