package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// A table the store's inserts cannot fill is refused by name at start: a
// column of the operator's that is NOT NULL without a default, or one of
// the store's that it leaves NULL made NOT NULL.
func TestTableWhoseInsertsFailIsRefusedByName(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	for _, tc := range []struct{ name, alter, want string }{
		{"extra", `ALTER TABLE extra ADD COLUMN tenant text NOT NULL`,
			"column tenant is NOT NULL without a default"},
		{"headless", `ALTER TABLE headless ALTER COLUMN head SET NOT NULL`,
			"column head is NOT NULL, and the proxy leaves it NULL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			newStore(t, srv, Options{Table: tc.name}) // creates the table
			if _, err := srv.Conn(t).Exec(ctx, tc.alter); err != nil {
				t.Fatal(err)
			}
			s, err := New(Options{URL: srv.URL(), Table: tc.name, Timeout: testTimeout})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			err = s.Prepare(ctx)
			if !errors.Is(err, ErrTableShape) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.name) {
				t.Fatalf("Prepare = %v; want ErrTableShape naming the table and %q", err, tc.want)
			}
		})
	}
	t.Run("operator's columns the database fills", func(t *testing.T) {
		newStore(t, srv, Options{Table: "filled"})
		if _, err := srv.Conn(t).Exec(ctx, `ALTER TABLE filled ADD COLUMN tenant text NOT NULL DEFAULT 'a',
			ADD COLUMN n bigint GENERATED ALWAYS AS IDENTITY, ADD COLUMN note text`); err != nil {
			t.Fatal(err)
		}
		s := newStore(t, srv, Options{Table: "filled"})
		if _, err := s.Begin(ctx, "k", store.Lease{}, time.Minute); err != nil {
			t.Fatalf("Begin on a table whose extra columns the database fills: %v", err)
		}
	})
}

// A table that refuses every write while the database answers reads (a
// NOT NULL column added while the proxy runs) makes the store unready,
// with the database's words, and ready again once writes pass.
func TestStoreThatRefusesEveryWriteIsNotReady(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	s := newStore(t, srv, Options{Table: "refusing"})
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping on a working table: %v", err)
	}
	admin := srv.Conn(t)
	if _, err := admin.Exec(ctx, `ALTER TABLE refusing ADD COLUMN tenant text NOT NULL DEFAULT 'a';
		ALTER TABLE refusing ALTER COLUMN tenant DROP DEFAULT`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(ctx, "k", store.Lease{}, time.Minute); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Begin on a table that refuses inserts = %v, want ErrUnavailable", err)
	}
	err := s.Ping(ctx)
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), `"tenant"`) {
		t.Fatalf("Ping while every insert fails = %v, want ErrUnavailable naming the column", err)
	}
	if _, err := admin.Exec(ctx, `ALTER TABLE refusing DROP COLUMN tenant`); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping once writes pass again: %v", err)
	}
	if _, err := s.Begin(ctx, "k", store.Lease{}, time.Minute); err != nil {
		t.Fatalf("Begin once writes pass again: %v", err)
	}
	var rows int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM refusing WHERE key <> 'k'`).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("rows the write checks left = %d, %v; want none", rows, err)
	}
}

// A record the database refuses (a CHECK constraint added while the proxy
// runs; a trigger or a column privilege alike) is said to be refused
// (store.ErrRefused, still ErrUnavailable to callers that do not tell
// them apart): the same write would be refused again, so the proxy stops
// renewing the lease it would record it in. A lost connection is not.
func TestRecordTheDatabaseRefusesIsSaidToBeRefused(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	s := newStore(t, srv, Options{Table: "refusing_records"})
	b, err := s.Begin(ctx, "k", store.Lease{}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	admin := srv.Conn(t)
	if _, err := admin.Exec(ctx, `ALTER TABLE refusing_records ADD CONSTRAINT no_records CHECK (head IS NULL) NOT VALID`); err != nil {
		t.Fatal(err)
	}
	err = s.Complete(ctx, "k", b.Token, &store.Record{Status: 201, Body: []byte("ok")}, time.Hour)
	if !errors.Is(err, store.ErrRefused) || !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "no_records") {
		t.Fatalf("Complete the table refuses = %v, want ErrRefused and ErrUnavailable naming the constraint", err)
	}
	srv.Stop()
	if err := s.Complete(ctx, "k", b.Token, &store.Record{Status: 201}, time.Hour); errors.Is(err, store.ErrRefused) || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Complete with the database stopped = %v, want ErrUnavailable, not ErrRefused", err)
	}
}
