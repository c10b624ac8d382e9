package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
)

// A table of an earlier version, without the lease column the proxy adds
// at start (docs/operating.md, "Upgrading a table of an earlier version").
const earlierTable = `CREATE TABLE idempotency_keys (
	key text PRIMARY KEY,
	token text NOT NULL,
	fingerprint bytea NOT NULL,
	expires_at timestamptz NOT NULL,
	head bytea,
	body bytea)`

// A SIGHUP that arrives while the proxy is still starting — here, waiting
// for a lock on its Postgres table — is a reload once it runs, never the
// signal's default action, which ends the process.
func TestSIGHUPWhileStartingIsAReloadNotAnExit(t *testing.T) {
	up, _ := countingUpstream(t)
	pg := pgtest.Start(t)
	ctx := t.Context()
	conn := pg.Conn(t)
	if _, err := conn.Exec(ctx, earlierTable); err != nil {
		t.Fatal(err)
	}
	holder, err := pg.Conn(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, `SELECT count(*) FROM idempotency_keys`); err != nil {
		t.Fatal(err)
	}

	admin := freeAddr(t)
	p := testbin.Start(t, testbin.Command{Path: testbin.Proxy.Path(t), Args: []string{
		"--upstream", up.URL, "--postgres-url", pg.URL(), "--listen", freeAddr(t), "--admin-listen", admin,
	}})
	waitFor(t, "the start to wait for the table's lock", func() bool {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query ILIKE 'ALTER TABLE%'`).Scan(&n)
		return err == nil && n > 0
	})
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(15*time.Second, "http://"+admin+"/healthz"); err != nil {
		t.Fatalf("after a SIGHUP while starting, the proxy does not serve: %v\n%s", err, p.Stderr())
	}
	waitFor(t, "the SIGHUP's reload", func() bool { return strings.Contains(p.Stderr(), `"trigger":"sighup"`) })
}
