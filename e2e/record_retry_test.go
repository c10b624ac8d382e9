package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/faultnet"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// logRecordGivenUp is the warning of a record the store never took.
const logRecordGivenUp = "could not record response before its lease expired"

// TestStoreBackInTheLeasesLastSecondGetsTheRecord stops Postgres while a
// key's upstream call runs (800 ms), so the response cannot be recorded
// when it comes back, and lets the proxy reach the database again only in
// the last second of the key's lease. The proxy's background retries use
// the whole lease: the record is written, and a retry after the lease
// replays it without reaching the upstream again.
//
// The database is restarted behind a TCP proxy that refuses connections
// until the chosen moment, so the moment the store is back does not depend
// on how long Postgres takes to start.
func TestStoreBackInTheLeasesLastSecondGetsTheRecord(t *testing.T) {
	pg := pgtest.Start(t)
	gate := faultnet.Start(t, pg.Addr())
	up := startUpstream(t)
	cfg := postgresConfig(up, strings.Replace(pg.URL(), pg.Addr(), gate.Addr(), 1))
	const lease = 6 * time.Second
	cfg.Defaults["lock_ttl"] = lease.String()
	p := startProxy(t, "settle", cfg)
	c := newClient(t, 30*time.Second)
	completeKeys(t, c, p, up, "before", 1)

	const key = "last-second"
	first := make(chan reply, 1)
	go func() {
		first <- send(context.Background(), c, p.URL(), request{Key: key, Header: map[string]string{hdrSleep: "800ms"}})
	}()
	up.WaitCount(key, 1, 10*time.Second)
	arrived := up.Execs(key)[0].At // the lease was taken just before
	gate.Refuse(true)
	gate.ResetAll()
	pg.Stop()
	if r := <-first; r.Err != nil || r.Status != http.StatusCreated {
		t.Fatalf("first request: %s, want its 201 delivered while the database is down", r)
	}
	pg.Start()
	// The retries double from 50 ms to 1 s: 800 ms + 0.05…4.55 s after
	// the lease began, the last one that finds more than a second left is
	// 5.35 s in. The store is back 5.65 s in, before the lease ends at 6 s.
	back := arrived.Add(5650 * time.Millisecond)
	if late := time.Since(back); late > 0 {
		t.Fatalf("postgres restarted %v after the moment the test lets the proxy reach it: the machine is too slow for this test", late)
	}
	time.Sleep(time.Until(back)) // the moment of the fault is the test's own choice
	gate.Refuse(false)

	var retry reply
	wait.SucceedsSoon(t, lease+5*time.Second, func() error {
		retry = mustSend(t, c, p.URL(), request{Key: key})
		if retry.Status == http.StatusConflict || retry.Status == http.StatusServiceUnavailable {
			return fmt.Errorf("retry %v after the call began: %s", time.Since(arrived), retry)
		}
		return nil
	})
	ex := up.Execs(key)
	if len(ex) != 1 || !retry.Replayed() || retry.Body != ex[0].Body {
		t.Fatalf("retry after the store came back: %s with %d upstream executions, want the replay of the one execution", retry, len(ex))
	}
	if line := findLogLine(p.Logs(), "WARN", logRecordGivenUp); line != nil {
		t.Errorf("the proxy gave the record up although the store came back within its lease: %v", line)
	}
	if n := metricSum(t, "idempotency_proxy_lock_lost_total", nil, p); n != 0 {
		t.Errorf("lock_lost_total = %v, want 0", n)
	}
}
