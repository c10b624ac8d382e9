package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// TestTable runs the cases that need a database but not its failures on
// one server.
func TestTable(t *testing.T) {
	srv := pgtest.Start(t)
	t.Run("CreatedAtStartWithItsIndex", func(t *testing.T) { testCreated(t, srv) })
	t.Run("OfAnotherShapeIsRefusedByName", func(t *testing.T) { testOtherShape(t, srv) })
	t.Run("EarlierVersionsTableGainsTheLeaseColumn", func(t *testing.T) { testEarlierTableMigrated(t, srv) })
	t.Run("MigrationRefusedNamesTheStatement", func(t *testing.T) { testMigrationRefused(t, srv) })
	t.Run("MigrationRefusedIsNotDone", func(t *testing.T) { testMigrationRefusedIsNotDone(t, srv) })
	t.Run("KeyMustBeUnique", func(t *testing.T) { testKeyMustBeUnique(t, srv) })
	t.Run("HealthNamesTheVersion", func(t *testing.T) { testHealthNamesTheVersion(t, srv) })
	t.Run("ReplayAndInFlightAnswersWriteNothing", func(t *testing.T) { testReadsWriteNothing(t, srv) })
	t.Run("ExpiredRowsAreSweptInBatches", func(t *testing.T) { testSweep(t, srv) })
	t.Run("ReplicasShareKeys", func(t *testing.T) { testReplicas(t, srv) })
}

func testCreated(t *testing.T, srv *pgtest.Server) {
	ctx := context.Background()
	s, err := New(Options{URL: srv.URL(), Table: "created", Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// --check looks without creating anything.
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	h, err := s.Health(ctx)
	if err != nil || !strings.HasPrefix(h.Server, "postgres 15") || !strings.Contains(h.Detail, "does not exist yet") {
		t.Fatalf("Health before Prepare = %+v, %v; want the version and a table not created yet", h, err)
	}
	if err := s.Prepare(ctx); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	h, err = s.Health(ctx)
	if err != nil || h.Detail != "table created exists" {
		t.Fatalf("Health after Prepare = %+v, %v; want the table to exist", h, err)
	}
	var index bool
	if err := srv.Conn(t).QueryRow(ctx, `SELECT to_regclass('created_expires_at') IS NOT NULL`).Scan(&index); err != nil || !index {
		t.Fatalf("index created_expires_at exists = %v, %v; want true", index, err)
	}
	// A second replica starting on the same table finds it ready.
	if again := newStore(t, srv, Options{Table: "created"}); again == nil {
		t.Fatal("second store")
	}
}

func testOtherShape(t *testing.T, srv *pgtest.Server) {
	ctx := context.Background()
	if _, err := srv.Conn(t).Exec(ctx, `CREATE TABLE orders (key text PRIMARY KEY, token integer, amount numeric)`); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{URL: srv.URL(), Table: "orders", Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Prepare(ctx)
	if !errors.Is(err, ErrTableShape) || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Prepare on another table = %v, want ErrTableShape, which stops the start", err)
	}
	for _, want := range []string{"table orders", "column token is integer, not text", "no column head"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Prepare error %q does not say %q", err, want)
		}
	}
	if _, err := s.Begin(ctx, "k", store.Lease{}, time.Minute); !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, ErrTableShape) {
		t.Errorf("Begin on another table = %v, want unavailable because of its shape", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, ErrTableShape) {
		t.Errorf("Ping once serving = %v, want the shape: /readyz says why", err)
	}
}

// earlierTable is the table as versions before leases were described made
// it, holding one of their leases.
const earlierTable = `CREATE TABLE %[1]s (
		key text PRIMARY KEY,
		token text NOT NULL,
		fingerprint bytea NOT NULL,
		expires_at timestamptz NOT NULL,
		head bytea,
		body bytea);
	INSERT INTO %[1]s (key, token, fingerprint, expires_at)
		VALUES ('old', 'tok', '\x0700000000000000000000000000000000000000000000000000000000000000', now() + interval '1 hour')`

// testEarlierTableMigrated: a table an earlier version made gets the
// lease column at start, its leases read as describing nothing, and
// leases taken from then on keep their description.
func testEarlierTableMigrated(t *testing.T, srv *pgtest.Server) {
	ctx := context.Background()
	if _, err := srv.Conn(t).Exec(ctx, fmt.Sprintf(earlierTable, "earlier")); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, srv, Options{Table: "earlier"})
	fp := store.Fingerprint{7}
	if e, err := s.Inspect(ctx, "old"); err != nil || e.State != store.InFlight || e.Lease != (store.Lease{Fingerprint: fp}) {
		t.Fatalf("Inspect of an earlier version's lease = %+v, %v; want in flight, describing nothing", e, err)
	}
	l := store.Lease{Fingerprint: fp, Request: store.Request{Method: "POST", Path: "/p"}, Instance: "p/1"}
	if _, err := s.Begin(ctx, "new", l, time.Minute); err != nil {
		t.Fatalf("Begin: %v", err)
	}
	if e, err := s.Inspect(ctx, "new"); err != nil || e.Lease != l {
		t.Fatalf("Inspect of a new lease = %+v, %v; want %+v", e.Lease, err, l)
	}
}

// testMigrationRefused: a role that may not alter the table is told what
// its owner runs, and the proxy does not start on a table it cannot use.
func testMigrationRefused(t *testing.T, srv *pgtest.Server) {
	ctx := context.Background()
	conn := srv.Conn(t)
	for _, q := range []string{
		fmt.Sprintf(earlierTable, "locked"),
		`CREATE ROLE limited LOGIN PASSWORD 'limited'`,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON locked TO limited`,
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
	s, err := New(Options{URL: u.String(), Table: "locked", Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Prepare(ctx)
	if !errors.Is(err, ErrTableShape) || !strings.Contains(err.Error(), `ALTER TABLE "locked" ADD COLUMN IF NOT EXISTS lease bytea`) {
		t.Fatalf("Prepare without the right to alter = %v, want ErrTableShape naming the statement", err)
	}
}

// testReadsWriteNothing: a replay and an in-flight answer leave the row as
// it was (its xmin, the transaction that wrote it, does not change), so
// they cost the database no write and no commit flush.
func testReadsWriteNothing(t *testing.T, srv *pgtest.Server) {
	ctx := context.Background()
	s := newStore(t, srv, Options{Table: "reads"})
	conn := srv.Conn(t)
	xmin := func(key string) string {
		t.Helper()
		var x string
		if err := conn.QueryRow(ctx, `SELECT xmin::text FROM reads WHERE key = $1`, key).Scan(&x); err != nil {
			t.Fatalf("xmin of %s: %v", key, err)
		}
		return x
	}
	fp := store.Fingerprint{1}
	b, err := s.Begin(ctx, "lease", store.Lease{Fingerprint: fp}, time.Minute)
	if err != nil || b.State != store.Acquired {
		t.Fatalf("Begin = %+v, %v", b, err)
	}
	before := xmin("lease")
	if b, err := s.Begin(ctx, "lease", store.Lease{Fingerprint: fp}, time.Minute); err != nil || b.State != store.InFlight {
		t.Fatalf("second Begin = %+v, %v; want in flight", b, err)
	}
	if after := xmin("lease"); after != before {
		t.Errorf("an in-flight answer rewrote the row (xmin %s → %s)", before, after)
	}
	if err := s.Complete(ctx, "lease", b.Token, &store.Record{Status: 201, Body: []byte("ok"), Fingerprint: fp}, time.Hour); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	before = xmin("lease")
	if b, err := s.Begin(ctx, "lease", store.Lease{Fingerprint: fp}, time.Minute); err != nil || b.State != store.Completed || string(b.Record.Body) != "ok" {
		t.Fatalf("Begin after Complete = %+v, %v; want the record", b, err)
	}
	if after := xmin("lease"); after != before {
		t.Errorf("a replay rewrote the row (xmin %s → %s)", before, after)
	}
}

func testSweep(t *testing.T, srv *pgtest.Server) {
	ctx := context.Background()
	s := newStore(t, srv, Options{Table: "sweep", SweepInterval: -1})
	conn := srv.Conn(t)
	const expired = 2*sweepBatch + 500
	if _, err := conn.Exec(ctx, `INSERT INTO sweep (key, token, fingerprint, expires_at)
		SELECT 'old-' || i, 't', '\x00', now() - interval '1 second' FROM generate_series(1, $1) i`, expired); err != nil {
		t.Fatal(err)
	}
	b, err := s.Begin(ctx, "live", store.Lease{}, time.Minute)
	if err != nil || b.State != store.Acquired {
		t.Fatalf("Begin = %+v, %v", b, err)
	}
	// Invisible at once, before any sweep.
	if _, err := s.Inspect(ctx, "old-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Inspect of an expired row = %v, want ErrNotFound", err)
	}
	if got := s.sweep(); got != expired {
		t.Errorf("sweep deleted %d rows, want %d (in batches of %d)", got, expired, sweepBatch)
	}
	var left int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM sweep`).Scan(&left); err != nil || left != 1 {
		t.Errorf("rows left = %d, %v; want the live lease only", left, err)
	}
}

func testReplicas(t *testing.T, srv *pgtest.Server) {
	ctx := context.Background()
	a := newStore(t, srv, Options{Table: "shared"})
	b := newStore(t, srv, Options{Table: "shared"})
	fp := store.Fingerprint{7}
	got, err := a.Begin(ctx, "k", store.Lease{Fingerprint: fp}, time.Minute)
	if err != nil || got.State != store.Acquired {
		t.Fatalf("Begin on a = %+v, %v", got, err)
	}
	if other, err := b.Begin(ctx, "k", store.Lease{Fingerprint: fp}, time.Minute); err != nil || other.State != store.InFlight {
		t.Fatalf("Begin on b = %+v, %v; want in flight: replicas share the table", other, err)
	}
	if err := b.Complete(ctx, "k", got.Token, &store.Record{Status: 200, Fingerprint: fp}, time.Hour); err != nil {
		t.Fatalf("Complete through b with a's token: %v", err)
	}
	if r, err := a.Begin(ctx, "k", store.Lease{Fingerprint: fp}, time.Minute); err != nil || r.State != store.Completed {
		t.Fatalf("Begin on a after b completed = %+v, %v; want completed", r, err)
	}
}

// TestDatabaseDownThenBack: with the database stopped, every operation
// fails at once with store.ErrUnavailable naming the cause and never the
// password; once it is back, the same store works again.
func TestDatabaseDownThenBack(t *testing.T) {
	srv := pgtest.Start(t)
	s := newStore(t, srv, Options{Table: "outage"})
	ctx := context.Background()
	fp := store.Fingerprint{3}
	b, err := s.Begin(ctx, "before", store.Lease{Fingerprint: fp}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "before", b.Token, &store.Record{Status: 201, Fingerprint: fp}, time.Hour); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	_, err = s.Begin(ctx, "during", store.Lease{Fingerprint: fp}, time.Minute)
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Begin with the database stopped = %v, want ErrUnavailable", err)
	}
	if strings.Contains(err.Error(), srv.Password()) {
		t.Errorf("the error shows the password: %v", err)
	}
	if !strings.Contains(err.Error(), "connect") && !strings.Contains(err.Error(), "refused") && !strings.Contains(err.Error(), "shut") {
		t.Errorf("the error does not name the cause: %v", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Ping with the database stopped = %v, want ErrUnavailable", err)
	}
	srv.Start()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping once the database is back: %v", err)
	}
	if r, err := s.Begin(ctx, "before", store.Lease{Fingerprint: fp}, time.Minute); err != nil || r.State != store.Completed {
		t.Fatalf("Begin of a record completed before the restart = %+v, %v; want it replayed", r, err)
	}
	if r, err := s.Begin(ctx, "after", store.Lease{Fingerprint: fp}, time.Minute); err != nil || r.State != store.Acquired {
		t.Fatalf("Begin of a new key after the restart = %+v, %v; want acquired", r, err)
	}
}
