package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/pgtest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testbin"
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
	testbin.SucceedsSoon(t, 30*time.Second, func() error {
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
	testbin.SucceedsSoon(t, 10*time.Second, func() error {
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
