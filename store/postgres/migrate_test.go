package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// While a long transaction holds an earlier version's table, a migration
// that gave up on its lock is not tried again by every operation: each try
// queues the table's other queries (an earlier replica's among them)
// behind its ALTER TABLE. Its failure says that it waited for a lock
// another transaction holds.
func TestFailedMigrationIsNotRetriedByEveryOperation(t *testing.T) {
	ctx := context.Background()
	s, admin, _ := storeOnAHeldEarlierTable(t)
	err := s.Prepare(ctx)
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "for a lock on the table that another transaction holds") {
		t.Fatalf("Prepare while the table is held = %v, want ErrUnavailable saying it waited for a lock", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Begin(ctx, "k", store.Lease{}, time.Minute)
		done <- err
	}()
	for {
		select {
		case err := <-done:
			if !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("Begin before the table is migrated = %v, want ErrUnavailable", err)
			}
			return
		default:
		}
		if alterWaiting(t, admin) {
			t.Fatal("Begin right after a failed migration queued another ALTER TABLE behind the held lock")
		}
	}
}

// An operation that finds the table's migration under way in another
// operation waits for it no longer than its own deadline: the migration
// may wait seconds for its lock, and every request would wait with it.
func TestOperationWaitsForAMigrationUnderWayOnlyUntilItsDeadline(t *testing.T) {
	ctx := context.Background()
	s, admin, tx := storeOnAHeldEarlierTable(t)
	migrating := make(chan error, 1)
	go func() {
		_, err := s.Begin(ctx, "first", store.Lease{}, time.Minute)
		migrating <- err
	}()
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if !alterWaiting(t, admin) {
			return errors.New("the first operation's ALTER TABLE does not wait for its lock yet")
		}
		return nil
	})
	late, cancel := context.WithCancel(ctx)
	cancel() // its caller is gone, or its deadline passed
	if _, err := s.Begin(late, "second", store.Lease{}, time.Minute); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Begin whose deadline passed while the table migrates = %v, want ErrUnavailable", err)
	}
	if !alterWaiting(t, admin) {
		t.Fatal("the second operation waited for the migration to give up on its lock")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-migrating; err != nil {
		t.Fatalf("Begin that migrated the table once its lock was free = %v", err)
	}
}

// storeOnAHeldEarlierTable is a store on an earlier version's table, which
// a long transaction (tx) has read: the table's migration waits for that
// transaction's lock until tx ends. admin is a connection of its own.
func storeOnAHeldEarlierTable(t *testing.T) (s *Store, admin *pgx.Conn, tx pgx.Tx) {
	t.Helper()
	srv := pgtest.Start(t)
	ctx := context.Background()
	admin = srv.Conn(t)
	if _, err := admin.Exec(ctx, fmt.Sprintf(earlierTable, "held")); err != nil {
		t.Fatal(err)
	}
	tx, err := srv.Conn(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM held`); err != nil {
		t.Fatal(err)
	}
	s, err = New(Options{URL: srv.URL(), Table: "held", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, admin, tx
}

// alterWaiting reports whether an ALTER TABLE waits for a lock.
func alterWaiting(t *testing.T, admin *pgx.Conn) bool {
	t.Helper()
	var n int
	if err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE query LIKE 'ALTER TABLE%' AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}
