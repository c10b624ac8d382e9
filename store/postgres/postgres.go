// Package postgres is the idempotency store on PostgreSQL, through
// github.com/jackc/pgx/v5: durable, and shared by every replica that uses
// the same table.
//
// # Table
//
// One row per idempotency key in the proxy's own table (Options.Table),
// created with its index at start when missing (Prepare):
//
//	key          text PRIMARY KEY   the storage key the proxy passes
//	token        text               the lease owner's random token
//	fingerprint  bytea              the owner's request fingerprint
//	expires_at   timestamptz        end of the lease, then of the record
//	head         bytea              store.AppendRecord of the record without
//	                                its body; NULL while the lease is in flight
//	body         bytea              the recorded body
//
// The record's body is a column of its own so that listings read the head
// and the body's size only. A completed row keeps its token: a completion
// retried after a lost reply finds its own record and succeeds.
//
// # Statements
//
// Every operation is one statement, sent with the extended protocol (its
// parameters never spliced into the text), and every time is the
// database's: now() (statement_timestamp() for the statements a batch
// sends together) decides expiry, so replicas with skewed clocks agree.
// A row whose expires_at has passed is absent to every statement at once.
//
//   - Begin reads the live row and, only when there is none, inserts its
//     lease (or takes over an expired row) in the same statement: a replay
//     or an in-flight answer is a read that writes nothing, a miss one write.
//   - Complete, Extend and Release are UPDATE and DELETE statements whose
//     WHERE clause names the owner's token: a lease that expired, was
//     deleted or was taken over is never changed.
//   - Inspect, Delete and List (in pages, by key) serve the admin API.
//
// The statements of Begin, Extend, Complete and Release from concurrent
// requests go to the database together, pipelined on one connection and
// committed once (batch.go): a round trip and a commit (with its fsync)
// shared by the batch, not paid by each statement.
//
// A replay of a record this replica read recently is answered from its
// cache (cache.go), bounded by Options.CacheBytes, without a statement.
// Two tables beside the proxy's, <table>_deletions and <table>_replicas,
// keep every cache from replaying a record once its Delete returned on
// any replica (replica.go).
//
// Expired rows are deleted in the background (sweep.go) in batches of
// sweepBatch rows, each its own short statement that skips rows another
// statement holds, so the sweep never waits on a request nor makes one wait.
//
// # Failures
//
// Every operation runs under Options.Timeout. A failure to get an answer
// (connection refused, authentication, a database shutting down, a timeout)
// wraps store.ErrUnavailable and pgx's error, which names the cause but
// never the password; a full disk wraps store.ErrFull. pgx reconnects on its
// own: when the database answers again, so does the store. A statement
// whose answer was lost may have run: a Begin run that way leaves a lease
// nobody holds, and its key answers "in flight" until the lease expires.
package postgres

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

const (
	// DefaultTable is the table the proxy keeps its keys in.
	DefaultTable = "idempotency_keys"
	// DefaultTimeout bounds each store operation.
	DefaultTimeout = 500 * time.Millisecond
	// DefaultMaxConns bounds the connections of one proxy process.
	DefaultMaxConns = 16
)

// Options configure the Postgres store. Each field with a `config` tag is
// a key of the store.postgres section.
type Options struct {
	// URL is postgres://[user[:password]@]host[:port]/database[?sslmode=...];
	// postgresql:// too. libpq's environment variables (PGPASSWORD...) and
	// password file apply as with psql.
	URL string `config:"url" flag:"postgres-url" address:"yes"`
	// Table is the proxy's table, optionally schema-qualified
	// ("idem.keys"); empty means DefaultTable.
	Table string `config:"table"`
	// Timeout bounds every operation, connecting included; 0 means
	// DefaultTimeout.
	Timeout time.Duration `config:"timeout"`
	// MaxConns bounds the pool; 0 means DefaultMaxConns.
	MaxConns int `config:"max_conns"`
	// Logger receives the sweeper's failures; nil discards them.
	Logger *slog.Logger
	// SweepInterval is the pause between two sweeps of expired rows; 0
	// means defaultSweepInterval, a negative value disables the sweeper.
	SweepInterval time.Duration
	// CacheBytes bounds the completed records held in memory to answer
	// replays without a statement (cache.go); 0 turns the cache off.
	// Defaults sets DefaultCacheBytes.
	CacheBytes int64 `config:"cache_bytes,size"`
	// CacheLease is the lease of the cache's registration (replica.go);
	// 0 means defaultCacheLease.
	CacheLease time.Duration
	// CachePoll is the pause between two reads of the deletions; 0 means
	// defaultCachePoll.
	CachePoll time.Duration
}

// Store is the Postgres store. It is safe for concurrent use.
type Store struct {
	pool    *pgxpool.Pool
	table   string // the table as named, for messages
	timeout time.Duration
	log     *slog.Logger
	sql     statements
	// batch sends Begin, Extend, Complete and Release (batch.go).
	batch batcher

	// prepared is set once the table is known to exist with the right
	// shape; until then each operation checks it first (Prepare).
	prepared atomic.Bool
	// preparing holds a token while one operation prepares the table: a
	// lock whose waiters give up at their deadline (ready).
	preparing chan struct{}
	// migrateErr is why the last migration failed, at migratedAt: ready
	// gives it back until migrateWait has passed (see migrateIfDue).
	// Guarded by preparing.
	migrateErr  error
	migratedAt  time.Time
	migrateWait time.Duration
	// serving is set by Prepare: from then on Ping prepares too.
	serving atomic.Bool
	// refused is set when the database refused an operation (an error it
	// answered, not a lost connection): until a write check passes, Ping
	// runs one, so that a table or role that refuses every write shows in
	// readiness (checkWrites).
	refused atomic.Bool

	// cache answers replays (cache.go); nil when Options.CacheBytes is 0.
	cache *cache
	// cacheLease and cachePoll pace the replicas' protocol (replica.go),
	// which every replica's Delete takes part in, cache or not.
	cacheLease, cachePoll time.Duration
	// rep is this replica's registration, which the poller keeps
	// (replica.go); guarded by repMu.
	rep   replica
	repMu sync.Mutex
	// replicaID is rep's id for Delete, nil while it has none.
	replicaID atomic.Pointer[string]
	// logLock is the advisory lock deletions are logged under.
	logLock int64

	stop      chan struct{}
	bg        sync.WaitGroup // the sweeper and the poller
	closeOnce sync.Once
}

var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// New builds the connection pool the options describe and starts the
// sweeper. It does not contact the database: Prepare does, and every
// operation prepares the table first until that succeeded once.
func New(opts Options) (*Store, error) {
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if !tableName.MatchString(opts.Table) {
		return nil, fmt.Errorf("postgres store: invalid table name %q", opts.Table)
	}
	cfg, err := parseURL(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	cfg.MaxConns = int32(opts.MaxConns)
	cfg.ConnConfig.ConnectTimeout = opts.Timeout
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	s := &Store{
		pool:       pool,
		table:      opts.Table,
		timeout:    opts.Timeout,
		log:        log,
		sql:        newStatements(quoteTable(opts.Table), newLogStatements(opts.Table)),
		cacheLease: cmp.Or(opts.CacheLease, defaultCacheLease),
		cachePoll:  cmp.Or(opts.CachePoll, defaultCachePoll),
		logLock:    logLockKey(opts.Table),
		stop:       make(chan struct{}),
		preparing:  make(chan struct{}, 1),
	}
	s.batch.s = s
	if opts.CacheBytes > 0 {
		s.cache = newCache(opts.CacheBytes)
		s.bg.Add(1)
		go s.pollLoop()
	}
	interval := cmp.Or(opts.SweepInterval, defaultSweepInterval)
	if interval > 0 {
		s.bg.Add(1)
		go s.sweepLoop(interval)
	}
	return s, nil
}

// parseURL parses a postgres:// URL into a pool configuration that only
// ever uses the extended protocol: a default_query_exec_mode in the URL
// cannot switch it to the simple one.
func parseURL(raw string) (*pgxpool.Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("invalid URL")
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return nil, fmt.Errorf("scheme must be postgres or postgresql, not %q", u.Scheme)
	}
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		return nil, parseError(err, u)
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	return cfg, nil
}

// parseError keeps the reason pgx gives for refusing a URL, never the URL
// itself (pgx masks the password, but a mistyped one may sit elsewhere).
func parseError(err error, u *url.URL) error {
	reason := "invalid URL"
	if inner := errors.Unwrap(err); inner != nil {
		msg := inner.Error()
		pw, _ := u.User.Password()
		if pw == "" || !strings.Contains(msg, pw) {
			reason += ": " + msg
		}
	}
	return errors.New(reason)
}

// quoteTable quotes each part of a (possibly schema-qualified) name.
func quoteTable(name string) string {
	return pgx.Identifier(strings.Split(name, ".")).Sanitize()
}

// Ping checks that the database answers and, once Prepare was called,
// that the table is ready: a table of another shape makes the proxy unready.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if s.serving.Load() {
		if err := s.ready(ctx); err != nil {
			return err
		}
	}
	var one int
	if err := s.pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		return s.translate("ping", err)
	}
	if s.serving.Load() && s.refused.Load() {
		return s.checkWrites(ctx)
	}
	return nil
}

// checkWrites runs what a key's life takes — Begin's insert, Complete's
// update, a delete — on a row of its own in a transaction it rolls back,
// and clears refused when they pass. A column, a constraint, a trigger or a
// role's privileges may refuse every write while the database answers
// reads: every request then gets on_store_error, and readiness must say so
// with the database's own words.
func (s *Store) checkWrites(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return s.translate("write check", err)
	}
	defer tx.Rollback(ctx)
	key, token := "idempotency-proxy write check "+newToken(), newToken()
	var fp [32]byte
	steps := []struct {
		sql  string
		args []any
	}{
		{s.sql.begin, []any{key, token, fp[:], int64(60_000), []byte(nil)}},
		{s.sql.complete, []any{key, token, []byte{0}, []byte{}, int64(60_000)}},
		{s.sql.delete, []any{key}},
	}
	for _, st := range steps {
		if _, err := tx.Exec(ctx, st.sql, st.args...); err != nil {
			return s.translate("write check", err)
		}
	}
	s.refused.Store(false)
	return nil
}

// Close stops the sweeper and the poller, withdraws the cache's
// registration, waits for the batches in flight (batch.go) and closes the
// pool. Operations called after it fail with store.ErrUnavailable.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		s.bg.Wait()
		s.batch.close()
		s.pool.Close()
	})
	return nil
}

// Error codes the store tells apart (PostgreSQL's appendix A).
const (
	codeDiskFull       = "53100"
	codeUndefinedTable = "42P01"
)

// translate maps a pgx error to the store's sentinel errors, keeping pgx's
// in the chain and the message: it names the cause.
func (s *Store) translate(op string, err error) error {
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case codeDiskFull:
			return fmt.Errorf("postgres %s: %w: %w", op, store.ErrFull, err)
		case codeUndefinedTable:
			// Dropped while running: create it again on the next call.
			s.prepared.Store(false)
		}
		if refusal(pe.Code) {
			s.refused.Store(true)
			return fmt.Errorf("postgres %s: %w: %w", op, store.ErrRefused, err)
		}
	}
	return fmt.Errorf("postgres %s: %w: %w", op, store.ErrUnavailable, sayAttemptsOnce(err))
}

// refusal reports whether an error the database answered says it will
// refuse the same statement again: a constraint, a privilege, a read-only
// server. The classes left out pass on their own (PostgreSQL's appendix
// A): a connection lost (08), a transaction rolled back under contention
// (40), resources short (53), a lock not granted in time (55), the server
// shutting down or a statement cancelled (57), a system error (58).
func refusal(code string) bool {
	switch code[:min(2, len(code))] {
	case "08", "40", "53", "55", "57", "58":
		return false
	}
	return true
}

// tokenLen is the length of a token: 128 random bits, hex-encoded.
const tokenLen = 32

func newToken() string {
	var b [tokenLen / 2]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
