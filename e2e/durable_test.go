package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// What survives what (docs/guarantees.md): each store is put through the
// failures of its row, and the upstream's own execution count is the
// judge.

// logMemoryForgets starts the memory store's line at start.
const logMemoryForgets = "store is in memory: every lease and record is forgotten"

// completeKeys sends n fresh keys named prefix-N and returns them, each
// executed once and answered 201.
func completeKeys(t *testing.T, c *http.Client, p *proxyProc, up *upstream, prefix string, n int) []string {
	t.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d", prefix, i)
		if r := mustSend(t, c, p.URL(), request{Key: keys[i]}); r.Status != http.StatusCreated || r.Replayed() {
			t.Fatalf("key %s: %s, want a fresh 201", keys[i], r)
		}
		up.onlyExecution(t, keys[i])
	}
	return keys
}

// checkReplayed asserts that every key replays its one execution without
// reaching the upstream again.
func checkReplayed(t *testing.T, c *http.Client, p *proxyProc, up *upstream, keys []string) {
	t.Helper()
	for _, key := range keys {
		r := mustSend(t, c, p.URL(), request{Key: key})
		ex := up.Execs(key)
		if len(ex) != 1 {
			t.Errorf("key %s: %d upstream executions, want 1: the record was lost", key, len(ex))
			continue
		}
		if !r.Replayed() || r.Body != ex[0].Body {
			t.Errorf("key %s: %s %q, want the replay of %q", key, r, r.Body, ex[0].Body)
		}
	}
}

// TestMemoryForgetsEverythingWhenKilled: the memory store says at start
// that it keeps nothing across a restart, and it does not: after a SIGKILL
// and a restart, every completed key executes again.
func TestMemoryForgetsEverythingWhenKilled(t *testing.T) {
	up := startUpstream(t)
	cfg := baseConfig(up, "")
	cfg.Memory = true
	p := startProxy(t, "memory", cfg)
	c := newClient(t, 10*time.Second)
	keys := completeKeys(t, c, p, up, "forgotten", 10)
	if line := findLogLine(p.Logs(), "INFO", logMemoryForgets); line == nil || line["store"] != "memory" {
		t.Errorf("start log has no info line %q with store=memory:\n%s", logMemoryForgets, p.Logs())
	}

	p.Kill()
	p.Restart()
	for _, key := range keys {
		r := mustSend(t, c, p.URL(), request{Key: key})
		if r.Status != http.StatusCreated || r.Replayed() {
			t.Errorf("key %s after the restart: %s, want a fresh 201: the memory store forgets", key, r)
		}
		if n := up.Count(key); n != 2 {
			t.Errorf("key %s: %d executions, want 2 (before and after the restart)", key, n)
		}
	}
	if n := strings.Count(p.Logs(), logMemoryForgets); n != 2 {
		t.Errorf("the memory store's warning was logged %d times, want once per start", n)
	}
}

// postgresConfig is baseConfig on the Postgres store at url.
func postgresConfig(up *upstream, url string) proxyConfig {
	cfg := baseConfig(up, "")
	cfg.PostgresURL = url
	return cfg
}

// TestPostgresKeepsEverythingWhenTheProxyIsKilled SIGKILLs a proxy on
// Postgres with keys completed and keys in the upstream: after a restart
// every completed key replays without reaching the upstream, and every
// key that was in flight stays locked (409) until its lock_ttl runs out,
// then executes once more (the documented ambiguous case).
func TestPostgresKeepsEverythingWhenTheProxyIsKilled(t *testing.T) {
	pg := pgtest.Start(t)
	up := startUpstream(t)
	t.Cleanup(up.Unhold)
	cfg := postgresConfig(up, pg.URL())
	// Long enough that the restart does not eat the lease left at the kill.
	const lease = 6 * time.Second
	cfg.Defaults["lock_ttl"] = lease.String()
	p := startProxy(t, "killed", cfg)
	c := newClient(t, 30*time.Second)

	done := completeKeys(t, c, p, up, "done", 20)
	inFlight := []string{"running-0", "running-1", "running-2"}
	for _, key := range inFlight {
		go send(context.Background(), c, p.URL(), request{Key: key, Header: map[string]string{hdrHold: "1"}})
		up.WaitCount(key, 1, 5*time.Second)
	}
	p.Kill()
	killed := time.Now()
	p.Restart()

	checkReplayed(t, c, p, up, done)
	for _, key := range inFlight {
		if r := mustSend(t, c, p.URL(), request{Key: key}); r.Problem() != "in-flight" {
			t.Errorf("key %s in flight at the kill: %s after the restart, want 409 in-flight", key, r)
		}
	}
	for _, key := range inFlight {
		var freed reply
		wait.SucceedsSoon(t, time.Until(killed.Add(lease+3*time.Second)), func() error {
			freed = mustSend(t, c, p.URL(), request{Key: key})
			if freed.Status == http.StatusConflict {
				return fmt.Errorf("key %s still locked %v after the kill, lock_ttl is %v", key, time.Since(killed), lease)
			}
			return nil
		})
		// Renewed every lock_ttl/3: at the kill at least two thirds were left.
		if held := time.Since(killed); held < lease/2 {
			t.Errorf("key %s freed %v after the kill, want it locked for about lock_ttl (%v)", key, held, lease)
		}
		ex := up.Execs(key)
		if len(ex) != 2 || freed.Status != http.StatusCreated || freed.Replayed() || freed.Body != ex[1].Body {
			t.Errorf("key %s after its lease: %s with %d executions, want one fresh execution more", key, freed, len(ex))
		}
	}
}

// TestPostgresStoppedAndRestarted stops the database under two proxies:
// on_store_error applies (fail_closed 503 without the upstream, fail_open
// forwarded), /readyz answers 503 with the cause and never the password;
// once the database is back, protection resumes without a restart and the
// records completed before the outage replay.
func TestPostgresStoppedAndRestarted(t *testing.T) {
	pg := pgtest.Start(t)
	up := startUpstream(t)
	ps := startReplicas(t, 2, withOpenRoute(postgresConfig(up, pg.URL())))
	c := newClient(t, 10*time.Second)
	done := completeKeys(t, c, ps[0], up, "before", 10)

	pg.Stop()
	for _, p := range ps {
		waitStatus(t, p.AdminURL()+"/readyz", http.StatusServiceUnavailable, 5*time.Second)
		code, body := getReadyz(t, p)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "postgres") ||
			!(strings.Contains(body, "connect") || strings.Contains(body, "refused") || strings.Contains(body, "shut")) {
			t.Errorf("%s /readyz with the database stopped = %d %q, want 503 with the cause", p.name, code, body)
		}
		if strings.Contains(body, pg.Password()) {
			t.Errorf("%s /readyz shows the database password: %q", p.name, body)
		}
	}
	t.Run("down", func(t *testing.T) { checkStoreDownPolicies(t, up, ps, "down") })

	pg.Start()
	for _, p := range ps {
		waitStatus(t, p.AdminURL()+"/readyz", http.StatusOK, 10*time.Second)
	}
	t.Run("records kept", func(t *testing.T) {
		checkReplayed(t, c, ps[1], up, done)
	})
	t.Run("protection resumes", func(t *testing.T) {
		checkExactlyOnce(t, up, fireConcurrently(t, ps, "resumed", 8, 6, map[string]string{hdrSleep: "100ms"}))
	})
	for _, p := range ps {
		if strings.Contains(p.Logs(), pg.Password()) {
			t.Errorf("%s logs show the database password", p.name)
		}
		if strings.Contains(get(t, p.AdminURL()+"/metrics"), pg.Password()) {
			t.Errorf("%s metrics show the database password", p.name)
		}
	}
}

// TestPostgresReplicasExactlyOnce fires concurrent duplicates at two
// proxies sharing one database: each key runs upstream exactly once. With
// concurrent: wait, a duplicate on the replica that does not run the key
// waits for the other's record instead of getting a 409.
func TestPostgresReplicasExactlyOnce(t *testing.T) {
	for _, mode := range []string{"reject", "wait"} {
		t.Run(mode, func(t *testing.T) {
			pg := pgtest.Start(t)
			up := startUpstream(t)
			cfg := postgresConfig(up, pg.URL())
			cfg.Defaults["concurrent"] = mode
			ps := startReplicas(t, 2, cfg)
			results, conflicts := fire(t, ps, "order", 30, 10, map[string]string{hdrSleep: "150ms"})
			checkExactlyOnce(t, up, results)
			switch {
			case mode == "reject" && conflicts == 0:
				t.Errorf("no client saw a 409 although 10 requests per key arrived at once")
			case mode == "wait" && conflicts > 0:
				t.Errorf("%d clients got a 409 under concurrent: wait, want every duplicate to wait for the record", conflicts)
			}
		})
	}
}

// TestReadmeRunsOnPostgres runs the README's one command for Postgres with
// the test's upstream and database: the proxy creates its table and a
// retried request is a replay.
func TestReadmeRunsOnPostgres(t *testing.T) {
	pg := pgtest.Start(t)
	up := startUpstream(t)
	cmds := shellCommands(t, markdownSection(t, readme(t), "With Postgres"))
	if len(cmds) != 1 || cmds[0][0][0] != "./idempotency-proxy" {
		t.Fatalf("the README's Postgres section runs %q, want one ./idempotency-proxy command", cmds)
	}
	args := slices.Clone(cmds[0][0][1:])
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--upstream":
			args[i+1] = up.URL()
		case "--postgres-url":
			args[i+1] = pg.URL()
		}
	}
	listen, admin := freeAddr(t), freeAddr(t)
	proxy := testbin.Start(t, testbin.Command{Path: proxyBin, Args: append(args, "--listen", listen, "--admin-listen", admin)})
	if err := proxy.WaitReady(readyTimeout, "http://"+admin+"/readyz"); err != nil {
		t.Fatalf("the proxy did not start on Postgres: %v\n%s", err, proxy.Stderr())
	}
	c := newClient(t, 10*time.Second)
	first := mustSend(t, c, "http://"+listen, request{Key: "readme"})
	again := mustSend(t, c, "http://"+listen, request{Key: "readme"})
	if first.Status != http.StatusCreated || !again.Replayed() || again.Body != first.Body || up.Count("readme") != 1 {
		t.Errorf("on Postgres: %s then %s with %d executions, want a 201 and its replay", first, again, up.Count("readme"))
	}
	var exists bool
	if err := pg.Conn(t).QueryRow(t.Context(), `SELECT to_regclass('idempotency_keys') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		t.Errorf("table idempotency_keys exists = %v, %v; want it created at start", exists, err)
	}
}
