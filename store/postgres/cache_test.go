package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/faultnet"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// replicaStore opens a store on srv through addr (a fault proxy; "" for
// the server itself), prepared, and waits until its cache, if it has one,
// is registered.
func replicaStore(t *testing.T, srv *pgtest.Server, addr string, opts Options) *Store {
	t.Helper()
	s := openStore(t, srv, addr, opts)
	if s.cache != nil {
		wait.SucceedsSoon(t, 10*time.Second, func() error {
			if _, ok := s.cache.readVersion(); !ok {
				return errors.New("the cache is not registered yet")
			}
			return nil
		})
	}
	return s
}

// completeOn completes key on s with a small record kept for ttl.
func completeOn(t *testing.T, s *Store, key string, ttl time.Duration) {
	t.Helper()
	ctx := context.Background()
	b, err := s.Begin(ctx, key, store.Lease{}, time.Minute)
	if err != nil || b.State != store.Acquired {
		t.Fatalf("Begin(%q) = %v, %v; want acquired", key, b.State, err)
	}
	rec := &store.Record{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{"id":1}`)}
	if err := s.Complete(ctx, key, b.Token, rec, ttl); err != nil {
		t.Fatalf("Complete(%q): %v", key, err)
	}
}

// replayed reads key through s, fills s's cache, and checks it holds it.
func replayed(t *testing.T, s *Store, key string) {
	t.Helper()
	b, err := s.Begin(context.Background(), key, store.Lease{}, time.Minute)
	if err != nil || b.State != store.Completed {
		t.Fatalf("Begin(%q) = %v, %v; want completed", key, b.State, err)
	}
	if _, ok := s.cache.get(key, time.Now()); !ok {
		t.Fatalf("the cache does not hold %q after a replay", key)
	}
}

// A key-API DELETE takes effect on every replica at once: once Delete
// returned, through a replica with a cache or one without, no replica's
// Begin replays the record from its cache.
func TestDeletedRecordIsNeverReplayedByAnotherReplica(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	// a has no cache, and still logs what it deletes; b polls slowly, so
	// that a Delete that did not wait for it finds its cache full.
	a := replicaStore(t, srv, "", Options{Table: "replicas", SweepInterval: -1})
	b := replicaStore(t, srv, "", Options{Table: "replicas", SweepInterval: -1,
		CacheBytes: DefaultCacheBytes, CachePoll: 300 * time.Millisecond})
	for i := range 6 {
		key := fmt.Sprintf("k%d", i)
		completeOn(t, a, key, time.Hour)
		replayed(t, b, key)
		deleter := a
		if i%2 == 1 {
			deleter = b // its own cache
		}
		if err := deleter.Delete(ctx, key); err != nil {
			t.Fatalf("Delete(%q): %v", key, err)
		}
		got, err := b.Begin(ctx, key, store.Lease{}, time.Minute)
		if err != nil {
			t.Fatalf("Begin(%q) after Delete: %v", key, err)
		}
		if got.State != store.Acquired {
			t.Fatalf("Begin(%q) right after Delete returned = %v, want acquired: the deleted record was replayed", key, got.State)
		}
	}
}

// A replica cut off from the database serves from its cache only until
// its lease's local end, which comes before the database's: a Delete
// elsewhere waits for it at most about the lease, and once it returned the
// replica no longer replays the record. Back in touch, the replica finds
// its registration gone and empties its cache, even once the deletions it
// missed are no longer kept.
func TestReplicaCutOffFromTheDatabaseStopsServingBeforeADeleteReturns(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	fault := faultnet.Start(t, srv.Addr())
	a := replicaStore(t, srv, "", Options{Table: "cutoff", SweepInterval: -1, Timeout: time.Second})
	b := replicaStore(t, srv, fault.Addr(), Options{Table: "cutoff", SweepInterval: -1, Timeout: time.Second,
		CacheBytes: DefaultCacheBytes})
	completeOn(t, a, "k", time.Hour)
	replayed(t, b, "k")

	fault.Refuse(true)
	fault.ResetAll()
	// From its cache, without the database.
	if got, err := b.Begin(ctx, "k", store.Lease{}, time.Minute); err != nil || got.State != store.Completed {
		t.Fatalf("Begin on the cut-off replica within its lease = %v, %v; want completed from its cache", got.State, err)
	}
	start := time.Now()
	if err := a.Delete(ctx, "k"); err != nil {
		t.Fatalf("Delete while a replica is cut off: %v", err)
	}
	t.Logf("Delete waited %s for the cut-off replica (lease %s)", time.Since(start).Round(time.Millisecond), defaultCacheLease)
	if got, err := b.Begin(ctx, "k", store.Lease{}, time.Minute); err == nil && got.State == store.Completed {
		t.Fatal("the cut-off replica replayed a record whose Delete returned")
	}

	// The deletions it missed are trimmed, as they are after
	// deletionsKept: only its lost registration tells it to forget.
	if _, err := srv.Conn(t).Exec(ctx, `DELETE FROM cutoff_deletions`); err != nil {
		t.Fatal(err)
	}
	fault.Refuse(false)
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		b.cache.mu.Lock()
		deadline := b.cache.deadline
		b.cache.mu.Unlock()
		if !time.Now().Before(deadline) {
			return errors.New("the replica back in touch does not serve from its cache yet")
		}
		return nil
	})
	got, err := b.Begin(ctx, "k", store.Lease{}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.Acquired {
		t.Fatalf("Begin on the replica back in touch = %v, want acquired: it replayed the deleted record", got.State)
	}
}

// A cached record ends before the database's row does: its time left is
// the database's, counted from when its read was sent.
func TestCachedRecordIsNeverServedPastItsExpiry(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	s := replicaStore(t, srv, "", Options{Table: "expiry", SweepInterval: -1, CacheBytes: DefaultCacheBytes})
	admin := srv.Conn(t)
	completeOn(t, s, "k", 1500*time.Millisecond)
	replayed(t, s, "k")
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		var live bool
		if err := admin.QueryRow(ctx, `SELECT expires_at > now() FROM expiry WHERE key = 'k'`).Scan(&live); err != nil {
			return err
		}
		if live {
			return errors.New("the record has not expired in the database yet")
		}
		return nil
	})
	got, err := s.Begin(ctx, "k", store.Lease{}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.Acquired {
		t.Fatalf("Begin after the record expired in the database = %v, want acquired", got.State)
	}
}

// A replica renews its registration as it polls: it outlives its lease
// under the same id, and its cache keeps serving what it held, never
// emptied by a registration lost for want of a renewal.
func TestReplicaKeepsItsRegistrationPastItsLease(t *testing.T) {
	srv := pgtest.Start(t)
	s := replicaStore(t, srv, "", Options{Table: "kept", SweepInterval: -1, CacheBytes: DefaultCacheBytes})
	completeOn(t, s, "k", time.Hour)
	replayed(t, s, "k")
	registration := func() replica {
		s.repMu.Lock()
		defer s.repMu.Unlock()
		return s.rep
	}
	first := registration()
	wait.SucceedsSoon(t, 10*s.cacheLease, func() error {
		if r := registration(); !r.renewedAt.After(first.renewedAt.Add(s.cacheLease)) {
			return fmt.Errorf("no renewal sent a whole lease (%s) after %s yet", s.cacheLease, first.renewedAt)
		}
		return nil
	})
	if r := registration(); r.id != first.id {
		t.Fatal("the registration was lost and made anew: it was not renewed within its lease")
	}
	if _, ok := s.cache.get("k", time.Now()); !ok {
		t.Fatal("the cache no longer serves what it held a lease ago")
	}
}

// A replica's poll that finds no deletion, its lease far from due for
// renewal (a quarter of it gone), only reads: its registration's row is
// not rewritten (its xmin stays), and no read in flight is kept from
// filling the cache.
func TestPollWithNothingToApplyOnlyReads(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	s := replicaStore(t, srv, "", Options{Table: "quiet", SweepInterval: -1,
		CacheBytes: DefaultCacheBytes, CacheLease: time.Hour, CachePoll: time.Hour})
	admin := srv.Conn(t)
	xmin := func() string {
		t.Helper()
		var x string
		if err := admin.QueryRow(ctx, `SELECT xmin::text FROM quiet_replicas`).Scan(&x); err != nil {
			t.Fatalf("xmin of the registration: %v", err)
		}
		return x
	}
	before := xmin()
	v, _ := s.cache.readVersion()
	s.poll()
	if after := xmin(); after != before {
		t.Errorf("a poll with nothing to apply rewrote the registration (xmin %s → %s)", before, after)
	}
	if after, _ := s.cache.readVersion(); after != v {
		t.Errorf("a poll with nothing to apply moved the cache's version from %d to %d: reads in flight are not kept", v, after)
	}
}

// A record read before a deletion was applied, or before the cache was
// reset, is not kept, and one kept while unregistered is never served.
func TestRecordReadBeforeADeletionIsNotCached(t *testing.T) {
	c := newCache(1 << 20)
	e := cached{fingerprint: make([]byte, 32), expires: time.Now().Add(time.Hour)}
	if _, ok := c.readVersion(); ok {
		t.Fatal("an unregistered cache says it may be filled")
	}
	c.reset(time.Now().Add(time.Hour))
	v, _ := c.readVersion()
	c.invalidate("k")
	c.fill("k", e, v)
	if _, ok := c.get("k", time.Now()); ok {
		t.Fatal("a record read before a deletion was applied was kept")
	}
	v, _ = c.readVersion()
	c.fill("k", e, v)
	if _, ok := c.get("k", time.Now()); !ok {
		t.Fatal("a record read after the last deletion was not kept")
	}
	c.setDeadline(time.Now().Add(-time.Millisecond))
	if _, ok := c.get("k", time.Now()); ok {
		t.Fatal("a cache past its lease's end served a record")
	}
	// Nor one read before a reset (a registration new or lost), whatever
	// deletions were applied besides.
	c.reset(time.Now().Add(time.Hour))
	v, _ = c.readVersion()
	c.invalidate("other")
	c.reset(time.Now().Add(time.Hour))
	c.fill("k", e, v)
	if _, ok := c.get("k", time.Now()); ok {
		t.Fatal("a record read before a deletion and a reset was kept")
	}
}

// The cache holds at most its bytes, and no record above cacheMaxRecord;
// an entry's bytes are its key's, fingerprint's, head's and body's, and
// cacheEntryOverhead.
func TestCacheIsBounded(t *testing.T) {
	const bound = 10 * cacheMaxRecord
	c := newCache(bound)
	c.reset(time.Now().Add(time.Hour))
	v, _ := c.readVersion()
	big := cached{body: make([]byte, cacheMaxRecord), expires: time.Now().Add(time.Hour)}
	c.fill("big", big, v)
	if _, ok := c.get("big", time.Now()); ok {
		t.Fatal("a record above cacheMaxRecord was kept")
	}
	fp := make([]byte, 32)
	largest := cached{fingerprint: fp, body: make([]byte, cacheMaxRecord-len("largest")-len(fp)-cacheEntryOverhead), expires: time.Now().Add(time.Hour)}
	c.fill("largest", largest, v)
	if _, ok := c.get("largest", time.Now()); !ok {
		t.Fatal("a record of exactly cacheMaxRecord was not kept")
	}
	for i := range 100 {
		c.fill(fmt.Sprint(i), cached{body: make([]byte, cacheMaxRecord/2), expires: time.Now().Add(time.Hour)}, v)
		if c.bytes > bound {
			t.Fatalf("the cache holds %d bytes, above its bound %d", c.bytes, bound)
		}
	}
	if len(c.m) == 0 {
		t.Fatal("the cache holds nothing")
	}

	// Records of a small body, two of which fill the cache exactly: what
	// bounds them is what else they hold, and an entry makes room for a
	// record read, only when it would pass the bound.
	small := cached{fingerprint: fp, head: make([]byte, 32), expires: time.Now().Add(time.Hour)}
	size := len("k0") + len(small.fingerprint) + len(small.head) + cacheEntryOverhead
	c = newCache(int64(2 * size))
	c.reset(time.Now().Add(time.Hour))
	v, _ = c.readVersion()
	for i := range 3 {
		c.fill(fmt.Sprintf("k%d", i), small, v)
	}
	held := 0
	for k, e := range c.m {
		held += len(k) + len(e.fingerprint) + len(e.head) + len(e.body) + cacheEntryOverhead
	}
	if held != 2*size {
		t.Fatalf("the cache holds %d entries of %d bytes, %d in all; want two, its bound of %d", len(c.m), size, held, 2*size)
	}
	if _, ok := c.get("k2", time.Now()); !ok {
		t.Fatal("the record read last was not kept: no entry made room for it")
	}

	// A record larger than the whole cache is not kept, even in an empty one.
	c = newCache(int64(size - 1))
	c.reset(time.Now().Add(time.Hour))
	v, _ = c.readVersion()
	c.fill("k0", small, v)
	if _, ok := c.get("k0", time.Now()); ok {
		t.Fatalf("a record of %d bytes was kept in a cache of %d", size, size-1)
	}
}

// An earlier version's replicas keep working beside the tables the cache
// adds: Prepare leaves the records table's shape as it was, and the
// earlier version's DELETE, which logs nothing, still works.
func TestEarlierVersionWorksBesideTheCacheTables(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	s := replicaStore(t, srv, "", Options{Table: "beside", SweepInterval: -1, CacheBytes: DefaultCacheBytes})
	again := replicaStore(t, srv, "", Options{Table: "beside", SweepInterval: -1, CacheBytes: DefaultCacheBytes})
	if err := s.checkShape(ctx); err != nil {
		t.Fatalf("the records table after Prepare: %v", err)
	}
	admin := srv.Conn(t)
	var cols int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_attribute WHERE attrelid = 'beside'::regclass AND attnum > 0 AND NOT attisdropped`).Scan(&cols); err != nil {
		t.Fatal(err)
	}
	if cols != len(columns) {
		t.Fatalf("the records table has %d columns after Prepare, want %d", cols, len(columns))
	}
	completeOn(t, again, "k", time.Hour)
	if tag, err := admin.Exec(ctx, s.sql.delete, "k"); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("an earlier version's delete = %v, %v", tag, err)
	}
}

// A role that may not create the tables beside its own is told what the
// database's owner runs (docs/operating.md's statements), and works once
// they ran: its cache registers and its deletions are logged.
func TestRoleThatMayNotCreateTheCacheTablesIsToldWhatToRun(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	conn := srv.Conn(t)
	replicaStore(t, srv, "", Options{Table: "granted", SweepInterval: -1}) // the owner makes the table
	for _, q := range []string{
		`DROP TABLE granted_deletions, granted_replicas`,
		`CREATE ROLE limited LOGIN PASSWORD 'limited'`,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON granted TO limited`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	u, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("limited", "limited")
	s, err := New(Options{URL: u.String(), Table: "granted", Timeout: testTimeout, SweepInterval: -1, CacheBytes: DefaultCacheBytes})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Prepare(ctx)
	if err == nil || errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), `CREATE TABLE IF NOT EXISTS "granted_deletions"`) {
		t.Fatalf("Prepare without the right to create tables = %v, want a refusal naming the statements", err)
	}
	for _, q := range []string{
		`CREATE TABLE granted_deletions (seq bigserial PRIMARY KEY, key text NOT NULL, at timestamptz NOT NULL DEFAULT now())`,
		`CREATE TABLE granted_replicas (id text PRIMARY KEY, acked bigint NOT NULL, expires_at timestamptz NOT NULL)`,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON granted_deletions, granted_replicas TO limited`,
		`GRANT USAGE ON SEQUENCE granted_deletions_seq_seq TO limited`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := s.Prepare(ctx); err != nil {
		t.Fatalf("Prepare once the owner made the tables: %v", err)
	}
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if _, ok := s.cache.readVersion(); !ok {
			return errors.New("the cache is not registered yet")
		}
		return nil
	})
	completeOn(t, s, "k", time.Hour)
	replayed(t, s, "k")
	if err := s.Delete(ctx, "k"); err != nil {
		t.Fatalf("Delete by the role: %v", err)
	}
	var logged int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM granted_deletions WHERE key = 'k'`).Scan(&logged); err != nil || logged != 1 {
		t.Fatalf("deletions logged = %d, %v; want 1", logged, err)
	}
}

// Replays racing a Delete on another replica never outlive it: no Begin
// started after the Delete returned is answered with the record, whether
// the replica read it from its cache or filled its cache while the
// deletion was being applied.
func TestReplaysRacingADeleteNeverOutliveIt(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	a := replicaStore(t, srv, "", Options{Table: "racing", SweepInterval: -1})
	b := replicaStore(t, srv, "", Options{Table: "racing", SweepInterval: -1, CacheBytes: DefaultCacheBytes})
	for i := range 5 {
		key := fmt.Sprintf("k%d", i)
		completeOn(t, a, key, time.Hour)
		var deleted atomic.Int64 // UnixNano once Delete returned
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					start := time.Now().UnixNano()
					got, err := b.Begin(ctx, key, store.Lease{}, time.Minute)
					if err != nil {
						t.Error(err)
						return
					}
					if d := deleted.Load(); d != 0 && start > d && got.State == store.Completed {
						t.Errorf("Begin(%q) started after its Delete returned replayed the record", key)
						return
					}
				}
			}()
		}
		replayed(t, b, key)
		if err := a.Delete(ctx, key); err != nil {
			t.Fatalf("Delete(%q): %v", key, err)
		}
		deleted.Store(time.Now().UnixNano())
		// Long enough for each replayer to begin again after the Delete.
		wait.SucceedsSoon(t, 10*time.Second, func() error {
			if _, ok := b.cache.get(key, time.Now()); ok {
				return errors.New("the replica's cache still holds the key")
			}
			got, err := b.Begin(ctx, key, store.Lease{}, time.Minute)
			if err != nil || got.State == store.Completed {
				return fmt.Errorf("Begin = %v, %v", got.State, err)
			}
			return nil
		})
		close(stop)
		wg.Wait()
	}
}

// A Delete the database refuses at its commit (here a deferred constraint
// trigger: every statement succeeds, the commit fails) is not reported
// done: it says the refusal, and the record is still there.
func TestDeleteRefusedAtItsCommitIsNotReportedDone(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	s := replicaStore(t, srv, "", Options{Table: "delete_refused", SweepInterval: -1})
	completeOn(t, s, "k", time.Hour)
	if _, err := srv.Conn(t).Exec(ctx, `
		CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			RAISE EXCEPTION 'refused at commit' USING ERRCODE = 'check_violation';
		END $$;
		CREATE CONSTRAINT TRIGGER refuse_delete AFTER DELETE ON delete_refused
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_delete()`); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "k"); !errors.Is(err, store.ErrRefused) {
		t.Errorf("Delete refused at its commit = %v, want ErrRefused", err)
	}
	if e, err := s.Inspect(ctx, "k"); err != nil || e.State != store.Completed {
		t.Errorf("Inspect after the refused Delete = %v, %v; want the record still there", e.State, err)
	}
}

// A replica that closes withdraws its registration, so that no Delete
// elsewhere waits for it until its lease ends.
func TestClosedReplicaWithdrawsItsRegistration(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	s := replicaStore(t, srv, "", Options{Table: "withdrawn", SweepInterval: -1, CacheBytes: DefaultCacheBytes})
	admin := srv.Conn(t)
	registered := func() int {
		t.Helper()
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM withdrawn_replicas`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := registered(); n != 1 {
		t.Fatalf("%d registrations of the replica, want 1", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := registered(); n != 0 {
		t.Errorf("%d registrations left once the replica closed, want none", n)
	}
}

// Tables beside the store's that the database will not create (here an
// event trigger refuses every new table, after the records table was
// made) stop Prepare with the database's reason: the store is never ready
// without them, its Deletes logging to a table that is not there.
func TestCacheTablesTheDatabaseWillNotCreateStopPrepare(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	newStore(t, srv, Options{Table: "taken", SweepInterval: -1}) // makes the records table
	if _, err := srv.Conn(t).Exec(ctx, `
		DROP TABLE taken_deletions, taken_replicas;
		CREATE FUNCTION no_new_tables() RETURNS event_trigger LANGUAGE plpgsql AS $$
		BEGIN
			RAISE EXCEPTION 'no new tables here';
		END $$;
		CREATE EVENT TRIGGER no_new_tables ON ddl_command_start WHEN TAG IN ('CREATE TABLE')
			EXECUTE FUNCTION no_new_tables()`); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{URL: srv.URL(), Table: "taken", Timeout: testTimeout, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Prepare(ctx); !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "no new tables here") {
		t.Fatalf("Prepare when the tables beside the store's cannot be created = %v, want ErrUnavailable with the database's reason", err)
	}
}

// A store whose cache is off (cache_bytes: 0) registers no cache: no
// Delete elsewhere waits for it, and it polls no deletions.
func TestStoreWithoutACacheRegistersNone(t *testing.T) {
	srv := pgtest.Start(t)
	s := newStore(t, srv, Options{Table: "uncached", SweepInterval: -1})
	var n int
	if err := srv.Conn(t).QueryRow(context.Background(), `SELECT count(*) FROM uncached_replicas`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 || s.cache != nil {
		t.Errorf("a store without a cache has %d registrations and a cache %v, want none", n, s.cache != nil)
	}
}
