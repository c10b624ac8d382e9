package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// testKeyMustBeUnique: Prepare takes a table of the store's columns whose
// key is unique on its own, and refuses one whose key is not, by name:
// each Begin's insert names the key in ON CONFLICT.
func testKeyMustBeUnique(t *testing.T, srv *pgtest.Server) {
	ctx := context.Background()
	conn := srv.Conn(t)
	for _, c := range []struct {
		table, key string
		want       string // in the error; "" for none
	}{
		{"no_primary_key", `key text NOT NULL,`, "key is not its primary key"},
		{"key_and_token", `key text, PRIMARY KEY (key, token),`, "key is not its primary key"},
		{"unique_key", `key text UNIQUE NOT NULL,`, ""},
	} {
		// The store's own CREATE TABLE, its key declared otherwise.
		create := newStatements(c.table, newLogStatements(c.table)).create
		create = strings.Replace(strings.Replace(create, " IF NOT EXISTS", "", 1), "key text PRIMARY KEY,", c.key, 1)
		if _, err := conn.Exec(ctx, create); err != nil {
			t.Fatalf("%s: %v", c.table, err)
		}
		s, err := New(Options{URL: srv.URL(), Table: c.table, Timeout: testTimeout, SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		err = s.Prepare(ctx)
		if c.want != "" {
			if !errors.Is(err, ErrTableShape) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.table) {
				t.Errorf("Prepare on %s = %v, want ErrTableShape naming it and saying %q", c.table, err, c.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("Prepare on %s = %v, want it taken", c.table, err)
			continue
		}
		fp := store.Fingerprint{5}
		b, err := s.Begin(ctx, "k", store.Lease{Fingerprint: fp}, time.Minute)
		if err == nil {
			err = s.Complete(ctx, "k", b.Token, &store.Record{Status: 201, Fingerprint: fp}, time.Hour)
		}
		if err != nil {
			t.Errorf("a key's life on %s: %v", c.table, err)
		}
	}
}

// testMigrationRefusedIsNotDone: a migration the database refuses for
// another reason than the role's rights (here a server that only reads, as
// a standby does) is reported as the migration's failure, not taken for
// done.
func testMigrationRefusedIsNotDone(t *testing.T, srv *pgtest.Server) {
	ctx := context.Background()
	if _, err := srv.Conn(t).Exec(ctx, fmt.Sprintf(earlierTable, "read_only")); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{URL: srv.URL() + "&default_transaction_read_only=on", Table: "read_only", Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Prepare(ctx)
	if !errors.Is(err, store.ErrRefused) || !strings.Contains(err.Error(), "add column lease to read_only") {
		t.Fatalf("Prepare on a server that only reads = %v, want the migration refused", err)
	}
}

// testHealthNamesTheVersion: Health names the server's version number,
// without the build's description that follows it.
func testHealthNamesTheVersion(t *testing.T, srv *pgtest.Server) {
	ctx := context.Background()
	var full string
	if err := srv.Conn(t).QueryRow(ctx, `SELECT current_setting('server_version')`).Scan(&full); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, srv, Options{Table: "health"})
	h, err := s.Health(ctx)
	if want := "postgres " + strings.Fields(full)[0]; err != nil || h.Server != want {
		t.Fatalf("Health = %+v, %v; want server %q (of %q)", h, err, want, full)
	}
}
