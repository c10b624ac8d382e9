package main

import (
	"context"
	"path/filepath"
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

// startWaitingForTheTable starts the proxy with args on a Postgres table of
// an earlier version whose lock another transaction holds, and returns once
// the start waits for that lock: the proxy is still starting, its store not
// ready. release lets the start go on.
func startWaitingForTheTable(t *testing.T, args ...string) (p *testbin.Process, admin string, release func()) {
	t.Helper()
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
	t.Cleanup(func() { holder.Rollback(context.Background()) })
	if _, err := holder.Exec(ctx, `SELECT count(*) FROM idempotency_keys`); err != nil {
		t.Fatal(err)
	}

	admin = freeAddr(t)
	p = testbin.Start(t, testbin.Command{Path: testbin.Proxy.Path(t), Args: append(args,
		"--postgres-url", pg.URL(), "--listen", freeAddr(t), "--admin-listen", admin,
	)})
	waitFor(t, "the start to wait for the table's lock", func() bool {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query ILIKE 'ALTER TABLE%'`).Scan(&n)
		return err == nil && n > 0
	})
	return p, admin, func() {
		if err := holder.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A SIGHUP that arrives while the proxy is still starting — here, waiting
// for a lock on its Postgres table — is a reload once it runs, never the
// signal's default action, which ends the process.
func TestSIGHUPWhileStartingIsAReloadNotAnExit(t *testing.T) {
	up, _ := countingUpstream(t)
	p, admin, release := startWaitingForTheTable(t, "--upstream", up.URL)
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	release()
	if err := p.WaitReady(15*time.Second, "http://"+admin+"/healthz"); err != nil {
		t.Fatalf("after a SIGHUP while starting, the proxy does not serve: %v\n%s", err, p.Stderr())
	}
	waitFor(t, "the SIGHUP's reload", func() bool { return strings.Contains(p.Stderr(), `"trigger":"sighup"`) })
}

// An edit of the config file while the proxy is still starting — here,
// waiting for a lock on its Postgres table — is applied once it runs: the
// file is watched from the moment it was read, not from when the proxy
// serves.
func TestConfigEditWhileStartingIsApplied(t *testing.T) {
	up, _ := countingUpstream(t)
	file := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, file, "routes:\n  - match: \"POST /v1/charges\"\n")
	p, admin, release := startWaitingForTheTable(t, "--config", file, "--upstream", up.URL)
	writeFile(t, file, "routes:\n  - match: \"POST /v1/charges\"\n    require_key: true\n")
	release()
	if err := p.WaitReady(15*time.Second, "http://"+admin+"/healthz"); err != nil {
		t.Fatalf("the proxy does not serve: %v\n%s", err, p.Stderr())
	}
	waitFor(t, "the edit made while starting applied", func() bool {
		return strings.Contains(p.Stderr(), `"msg":"config reloaded","trigger":"file_changed"`)
	})
}
