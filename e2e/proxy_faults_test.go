package e2e

import (
	"context"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// lockTTL is the lease of baseConfig.
const lockTTL = 2 * time.Second

// TestProxyKilledMidRequest SIGKILLs the proxy running a key's upstream
// call: no one can settle the key, so it stays locked (409) on every
// replica until its lease runs out, and then exactly one retry executes.
func TestProxyKilledMidRequest(t *testing.T) {
	srv := redistest.Start(t)
	up := startUpstream(t)
	ps := startReplicas(t, 2, baseConfig(up, srv.URL()))
	c := newClient(t, 10*time.Second)
	const key = "proxy-killed"

	go send(context.Background(), c, ps[0].URL(), request{Key: key, Header: map[string]string{hdrSleep: "1s"}})
	up.WaitCount(key, 1, 5*time.Second)
	ps[0].Kill()
	killed := time.Now()

	// Poll the surviving replica: 409 with Retry-After until the lease
	// expires, then one fresh execution.
	var freed reply
	polls := 0
	wait.SucceedsSoon(t, time.Until(killed.Add(lockTTL+2*time.Second)), func() error {
		r := mustSend(t, c, ps[1].URL(), request{Key: key})
		if r.Status != http.StatusConflict {
			freed = r
			return nil
		}
		if polls++; polls == 1 && (r.Problem() != "in-flight" || r.Header.Get("Retry-After") != "1") {
			t.Errorf("key of a killed proxy: %s (Retry-After %q), want 409 in-flight with Retry-After: 1", r, r.Header.Get("Retry-After"))
		}
		return fmt.Errorf("key still locked %v after the kill, lock_ttl is %v", time.Since(killed), lockTTL)
	})
	// The lease is renewed every lock_ttl/3, so at the kill it had at
	// least two thirds of lock_ttl left.
	if held := time.Since(killed); held < lockTTL/2 {
		t.Errorf("key freed %v after the kill, want it locked for about lock_ttl (%v)", held, lockTTL)
	}
	ex := up.Execs(key)
	if len(ex) != 2 {
		t.Fatalf("executions = %d, want 2 (the killed one and the retry)", len(ex))
	}
	if freed.Status != http.StatusCreated || freed.Replayed() || freed.Body != ex[1].Body {
		t.Errorf("first reply after expiry: %s %q, want a fresh 201 %q", freed, freed.Body, ex[1].Body)
	}
	again := mustSend(t, c, ps[1].URL(), request{Key: key})
	if !again.Replayed() || again.Body != ex[1].Body {
		t.Errorf("next retry: %s %q, want the replay of %q", again, again.Body, ex[1].Body)
	}
	if got := up.Count(key); got != 2 {
		t.Errorf("executions at the end = %d, want 2", got)
	}
}

// TestProxyTerminatedMidRequest sends SIGTERM while a request is in the
// upstream: the proxy stops accepting, lets the request finish and record,
// exits 0, and another replica on the same Redis replays the response.
func TestProxyTerminatedMidRequest(t *testing.T) {
	srv := redistest.Start(t)
	up := startUpstream(t)
	ps := startReplicas(t, 2, baseConfig(up, srv.URL()))
	c := newClient(t, 10*time.Second)
	const key = "proxy-terminated"

	done := make(chan reply, 1)
	go func() {
		done <- send(context.Background(), c, ps[0].URL(), request{Key: key, Header: map[string]string{hdrSleep: "1500ms"}})
	}()
	up.WaitCount(key, 1, 5*time.Second)
	ps[0].Signal(syscall.SIGTERM)

	// New connections are refused while the request drains.
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}
	err := wait.SoonError(time.Second, func() error {
		if r := send(context.Background(), fresh, ps[0].URL(), request{Method: http.MethodGet, Path: "/"}); r.Err == nil {
			return fmt.Errorf("the terminating proxy still accepts new connections after SIGTERM: %s", r)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}

	first := <-done
	ex := up.onlyExecution(t, key)
	if first.Err != nil || first.Status != http.StatusCreated || first.Body != ex.Body {
		t.Fatalf("in-flight request: %s %q, want 201 %q", first, first.Body, ex.Body)
	}
	code, exited := ps[0].Wait(5 * time.Second)
	if !exited || code != 0 {
		t.Errorf("after SIGTERM: exited %v with code %d, want exit 0", exited, code)
	}
	replayed := mustSend(t, c, ps[1].URL(), request{Key: key})
	if !replayed.Replayed() || replayed.Body != ex.Body {
		t.Errorf("other replica: %s %q, want the replay of %q", replayed, replayed.Body, ex.Body)
	}
	up.onlyExecution(t, key)
}
