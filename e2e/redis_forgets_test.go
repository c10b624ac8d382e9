package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

const mDataLoss = "idempotency_proxy_store_data_loss_total"

// waitDataLoss waits, without asking /readyz (whose check would notice too),
// until p's background check has counted want losses: it must within 10 s.
func waitDataLoss(t *testing.T, p *proxyProc, want float64) {
	t.Helper()
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		switch got := metricSum(t, mDataLoss, nil, p); {
		case got > want:
			t.Fatalf("%s = %v, want %v", mDataLoss, got, want)
		case got < want:
			return fmt.Errorf("%s = %v, want %v", mDataLoss, got, want)
		}
		return nil
	})
}

// TestRedisThatForgetsIsNoticed runs two proxies on one Redis: a FLUSHALL
// and a restart without persistence are each noticed within 10 s by both
// (an error line with the fix, the counter, a /readyz line that stays 200),
// while a proxy restart is no loss. docs/redis.md, "When Redis forgets".
func TestRedisThatForgetsIsNoticed(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
	up := startUpstream(t)
	ps := startReplicas(t, 2, baseConfig(up, srv.URL()))
	c := newClient(t, 5*time.Second)
	if r := mustSend(t, c, ps[0].URL(), request{Key: "before-the-loss"}); r.Status != http.StatusCreated {
		t.Fatalf("first request: %s", r)
	}

	ps[1].Restart() // a proxy restart forgets nothing of Redis'
	if code, body := readyz(t, ps[1]); code != http.StatusOK || strings.Contains(body, "data lost") {
		t.Fatalf("/readyz after a proxy restart: %d %q, want 200 without a loss", code, body)
	}

	if err := srv.Client(t).FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		waitDataLoss(t, p, 1)
		code, body := readyz(t, p)
		if code != http.StatusOK || !strings.Contains(body, "store data lost 1 time(s)") {
			t.Errorf("/readyz of %s after FLUSHALL: %d %q, want 200 naming the loss", p.name, code, body)
		}
		if n := len(p.logLines(map[string]string{"level": "ERROR", "msg": lossMessage(p)})); n != 1 {
			t.Errorf("%s logged the loss %d times, want once", p.name, n)
		}
	}
	// The key's record went with the data: the retry executes again, as
	// the operator was told.
	if r := mustSend(t, c, ps[0].URL(), request{Key: "before-the-loss"}); r.Status != http.StatusCreated || up.Count("before-the-loss") != 2 {
		t.Fatalf("retry after the loss: %s, %d executions", r, up.Count("before-the-loss"))
	}

	srv.Restart() // --save "" --appendonly no: nothing survives
	for _, p := range ps {
		waitDataLoss(t, p, 2)
	}
}

// lossMessage is the loss line's message as p logged it.
func lossMessage(p *proxyProc) string {
	for _, line := range p.logLines(map[string]string{"level": "ERROR"}) {
		if msg, _ := line["msg"].(string); strings.HasPrefix(msg, "the store forgot what it held") {
			return msg
		}
	}
	return "the store forgot what it held"
}

func readyz(t *testing.T, p *proxyProc) (int, string) {
	t.Helper()
	res, err := http.Get(p.AdminURL() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := res.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return res.StatusCode, b.String()
}

// TestShortLockTTLIsReportedBeforeTheFirstRequest: on Sentinel with
// down-after-milliseconds 1000 a failover may take 3 s, which a lock_ttl of
// 3s cannot outlive (it needs 5s): the proxy says so at start, before any
// request, names only that route in /readyz and sets the gauge.
func TestShortLockTTLIsReportedBeforeTheFirstRequest(t *testing.T) {
	sn := redistest.StartSentinel(t)
	up := startUpstream(t)
	cfg := baseConfig(up, "")
	cfg.RedisAddrs, cfg.MasterName = sn.SentinelAddrs(), sn.MasterName()
	cfg = withPolicy(cfg, "lock_ttl", "10s")
	cfg.Routes = []routeConfig{{Match: "POST /v1/charges", Keys: map[string]string{"lock_ttl": "3s"}}}
	p := startProxy(t, "sentinel", cfg)

	want := map[string]string{"level": "ERROR", "routes": "POST /v1/charges (lock_ttl 3s)", "min_lock_ttl": "5s"}
	// The start check or the first watch writes it.
	_ = wait.SoonError(10*time.Second, func() error {
		if len(p.logLines(want)) == 0 {
			return fmt.Errorf("no error line naming the short lock_ttl yet")
		}
		return nil
	})
	if n := len(p.logLines(want)); n != 1 {
		t.Fatalf("%d error lines naming the short lock_ttl before any request, want 1", n)
	}
	if got := metricSum(t, "idempotency_proxy_lock_ttl_unsafe", nil, p); got != 1 {
		t.Errorf("lock_ttl_unsafe = %v, want 1", got)
	}
	code, body := readyz(t, p)
	if code != http.StatusOK || !strings.Contains(body, "POST /v1/charges (lock_ttl 3s)") || strings.Contains(body, "default (") {
		t.Errorf("/readyz = %d %q, want 200 naming only the 3s route", code, body)
	}
}

// TestRedisRestoredFromAnOlderSnapshotIsNoticed: two proxies on one Redis
// with RDB persistence; keys recorded, SAVE, more keys recorded and a check
// after them, then Redis is SIGKILLed and restarts from the older dump.rdb.
// Both proxies notice within 10 s (an error line, the counter, a /readyz
// line that stays 200), one naming the older copy, before a key recorded
// after the snapshot executes again; a key in the snapshot still replays.
// docs/redis.md, "When Redis forgets".
func TestRedisRestoredFromAnOlderSnapshotIsNoticed(t *testing.T) {
	// RDB persistence with no automatic snapshot during the test: the
	// only dump.rdb is the SAVE below.
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction", "--save", "3600 1")
	up := startUpstream(t)
	ps := startReplicas(t, 2, baseConfig(up, srv.URL()))
	c := newClient(t, 5*time.Second)
	for _, p := range ps {
		if code, body := readyz(t, p); code != http.StatusOK || strings.Contains(body, "data lost") {
			t.Fatalf("/readyz of %s at start: %d %q", p.name, code, body)
		}
	}
	if r := mustSend(t, c, ps[0].URL(), request{Key: "in-the-snapshot"}); r.Status != http.StatusCreated {
		t.Fatalf("first request: %s", r)
	}
	if err := srv.Client(t).Save(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if r := mustSend(t, c, ps[1].URL(), request{Key: "after-the-snapshot"}); r.Status != http.StatusCreated {
		t.Fatalf("request after the snapshot: %s", r)
	}
	// A check after the snapshot: what the proxies saw is now newer than
	// what dump.rdb holds.
	if code, body := readyz(t, ps[0]); code != http.StatusOK || strings.Contains(body, "data lost") {
		t.Fatalf("/readyz after the snapshot: %d %q", code, body)
	}

	srv.Restart() // SIGKILL; the restart loads the older dump.rdb
	restarted := time.Now()
	if n := srv.CountKeys(t, "idem:{*}"); n != 1 {
		t.Fatalf("Redis holds %d keys after the restart, want the snapshot's one", n)
	}
	older := false
	for _, p := range ps {
		waitDataLoss(t, p, 1)
		t.Logf("%s counted the loss within %v of the restart", p.name, time.Since(restarted).Round(100*time.Millisecond))
		code, body := readyz(t, p)
		if code != http.StatusOK || !strings.Contains(body, "store data lost 1 time(s)") {
			t.Errorf("/readyz of %s after the restore: %d %q, want 200 naming the loss", p.name, code, body)
		}
		older = older || strings.Contains(body, "older copy")
		if n := len(p.logLines(map[string]string{"level": "ERROR", "msg": lossMessage(p)})); n != 1 {
			t.Errorf("%s logged the loss %d times, want once", p.name, n)
		}
	}
	if !older {
		t.Errorf("no proxy named the older copy as the cause")
	}
	if r := mustSend(t, c, ps[1].URL(), request{Key: "in-the-snapshot"}); !r.Replayed() || up.Count("in-the-snapshot") != 1 {
		t.Errorf("retry of the key in the snapshot: %s, %d executions; want its replay", r, up.Count("in-the-snapshot"))
	}
	// The later key's record went with the lost writes: its retry
	// executes again, as the operator was told.
	if r := mustSend(t, c, ps[0].URL(), request{Key: "after-the-snapshot"}); r.Status != http.StatusCreated || up.Count("after-the-snapshot") != 2 {
		t.Errorf("retry of the key after the snapshot: %s, %d executions", r, up.Count("after-the-snapshot"))
	}
}
