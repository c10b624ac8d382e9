package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// The proxy's own Postgres table at start: a table it cannot use is
// refused by name, one an earlier version made is migrated, and what the
// database does meanwhile shows in the logs and /readyz.

// earlierTable is the table as versions before leases were described made it.
const earlierTable = `CREATE TABLE idempotency_keys (
	key text PRIMARY KEY,
	token text NOT NULL,
	fingerprint bytea NOT NULL,
	expires_at timestamptz NOT NULL,
	head bytea,
	body bytea)`

// startProxyUnready is startProxy for a proxy whose store is not ready at
// start: it returns once /healthz answers, whatever /readyz says.
func startProxyUnready(t testing.TB, name string, cfg proxyConfig) *proxyProc {
	t.Helper()
	p := &proxyProc{t: t, name: name, env: cfg.Env, stderr: &testbin.Buffer{}}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("proxy %s stderr:\n%s", p.name, p.stderr.String())
		}
	})
	p.listen, p.admin = freeAddr(t), freeAddr(t)
	p.config = filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(p.config, []byte(cfg.yaml(p.listen, p.admin)), 0o600); err != nil {
		t.Fatalf("write config: %v", err)
	}
	proc, err := testbin.Launch(testbin.Command{Path: proxyBin, Args: []string{"--config", p.config}, Stdout: p.stderr}, p.stderr)
	if err != nil {
		t.Fatalf("proxy %s: %v", name, err)
	}
	p.mu.Lock()
	p.proc = proc
	p.mu.Unlock()
	if err := proc.WaitReady(readyTimeout, p.AdminURL()+"/healthz"); err != nil {
		t.Fatalf("proxy %s did not start: %v\nstderr:\n%s", name, err, p.stderr.String())
	}
	return p
}

// TestShortLockOnAnEarlierTableDelaysServingOnlyWhileHeld starts a proxy
// on a table an earlier version made while another transaction holds a
// lock on it, so the lease column cannot be added yet. The proxy says
// why — the lock it waited for, in its log and /readyz — and once the
// transaction ends it migrates the table and serves within seconds.
func TestShortLockOnAnEarlierTableDelaysServingOnlyWhileHeld(t *testing.T) {
	pg := pgtest.Start(t)
	ctx := t.Context()
	if _, err := pg.Conn(t).Exec(ctx, earlierTable); err != nil {
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
	up := startUpstream(t)
	p := startProxyUnready(t, "migrate", postgresConfig(up, pg.URL()))

	// The migration's failure, wherever it is logged (the store's warning,
	// the readiness check's error), names the lock it waited for.
	var failures []string
	wait.SucceedsSoon(t, 30*time.Second, func() error {
		failures = linesWith(p.Logs(), "add column lease")
		if len(failures) == 0 {
			return fmt.Errorf("no log line says why the lease column is not added yet")
		}
		return nil
	})
	for _, line := range failures {
		if !strings.Contains(line, "waited 2s for a lock") || strings.Contains(line, "deadline exceeded") {
			t.Errorf("the migration's failure is logged as %s, want the lock it waited for as the cause", line)
		}
	}
	if findLogLine(p.Logs(), "WARN", "postgres table not migrated") == nil {
		t.Errorf("no warning that the table is not migrated yet")
	}
	if code, body := getReadyz(t, p); code != http.StatusServiceUnavailable || !strings.Contains(body, "waited 2s for a lock") {
		t.Errorf("/readyz while the table is held = %d %q, want 503 naming the lock", code, body)
	}

	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	c := newClient(t, 10*time.Second)
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if r := mustSend(t, c, p.URL(), request{Key: "after-the-lock"}); r.Status != http.StatusCreated {
			return fmt.Errorf("request %v after the lock was released: %s", time.Since(released), r)
		}
		return nil
	})
	t.Logf("served %v after the lock was released", time.Since(released))
	if findLogLine(p.Logs(), "INFO", "postgres table migrated") == nil {
		t.Errorf("no log line says the table was migrated")
	}
	for _, line := range linesWith(p.Logs(), "deadline exceeded") {
		t.Errorf("a log line gives a deadline as the cause: %s", line)
	}
}

// linesWith is every line of logs that contains s.
func linesWith(logs, s string) []string {
	var out []string
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// TestPostgresTableThatRefusesInsertsIsRefusedOrUnready: a table with a
// column of its own that is NOT NULL without a default passes no insert
// of the proxy's. At start the proxy refuses it, naming the table and the
// column, and exits 1; added while the proxy runs, every request gets
// on_store_error and /readyz answers 503 with the database's words, until
// writes pass again.
func TestPostgresTableThatRefusesInsertsIsRefusedOrUnready(t *testing.T) {
	pg := pgtest.Start(t)
	ctx := t.Context()
	admin := pg.Conn(t)
	up := startUpstream(t)
	cfg := postgresConfig(up, pg.URL())

	t.Run("at start", func(t *testing.T) {
		if _, err := admin.Exec(ctx, strings.Replace(earlierTable, "body bytea)", "body bytea, lease bytea, tenant text NOT NULL)", 1)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = admin.Exec(ctx, `DROP TABLE idempotency_keys`) })
		file := filepath.Join(t.TempDir(), "refused.yaml")
		if err := os.WriteFile(file, []byte(cfg.yaml(freeAddr(t), freeAddr(t))), 0o600); err != nil {
			t.Fatal(err)
		}
		var stderr testbin.Buffer
		proc, err := testbin.Launch(testbin.Command{Path: proxyBin, Args: []string{"--config", file}, Stdout: &stderr}, &stderr)
		if err != nil {
			t.Fatal(err)
		}
		code, exited := proc.Wait(30 * time.Second)
		if !exited {
			proc.Kill()
			t.Fatalf("the proxy started on a table whose every insert fails:\n%s", stderr.String())
		}
		out := stderr.String()
		if code != 1 || !strings.Contains(out, "table idempotency_keys") ||
			!strings.Contains(out, "column tenant is NOT NULL without a default") {
			t.Errorf("exit %d with\n%s\nwant exit 1 naming the table and its column tenant", code, out)
		}
	})

	t.Run("while running", func(t *testing.T) {
		p := startProxy(t, "refusing", cfg)
		c := newClient(t, 10*time.Second)
		completeKeys(t, c, p, up, "before", 1)
		if _, err := admin.Exec(ctx, `ALTER TABLE idempotency_keys ADD COLUMN tenant text NOT NULL DEFAULT 'a';
			ALTER TABLE idempotency_keys ALTER COLUMN tenant DROP DEFAULT`); err != nil {
			t.Fatal(err)
		}
		if r := mustSend(t, c, p.URL(), request{Key: "refused"}); r.Problem() != "store-unavailable" || up.Count("refused") != 0 {
			t.Fatalf("a new key while every insert fails: %s with %d executions, want 503 store-unavailable without the upstream", r, up.Count("refused"))
		}
		waitStatus(t, p.AdminURL()+"/readyz", http.StatusServiceUnavailable, 10*time.Second)
		if code, body := getReadyz(t, p); code != http.StatusServiceUnavailable || !strings.Contains(body, `"tenant"`) {
			t.Errorf("/readyz while every insert fails = %d %q, want 503 naming the column", code, body)
		}
		if _, err := admin.Exec(ctx, `ALTER TABLE idempotency_keys DROP COLUMN tenant`); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, p.AdminURL()+"/readyz", http.StatusOK, 10*time.Second)
		if r := mustSend(t, c, p.URL(), request{Key: "after"}); r.Status != http.StatusCreated {
			t.Errorf("a new key once inserts pass again: %s, want 201", r)
		}
	})
}
