package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/faultnet"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// TestSlowUpstreamLeaseRenewed: an upstream slower than lock_ttl keeps its
// lease by renewal, so duplicates arriving after lock_ttl still get 409 on
// every replica and the key runs once.
func TestSlowUpstreamLeaseRenewed(t *testing.T) {
	srv := redistest.Start(t)
	up := startUpstream(t)
	ps := startReplicas(t, 2, withPolicy(baseConfig(up, srv.URL()), "lock_ttl", "1s"))
	c := newClient(t, 10*time.Second)
	const key = "slow-upstream"

	done := make(chan reply, 1)
	go func() {
		done <- send(context.Background(), c, ps[0].URL(), request{Key: key, Header: map[string]string{hdrSleep: "2500ms"}})
	}()
	up.WaitCount(key, 1, 5*time.Second)
	conflicts := 0
	if err := wait.Throughout(2*time.Second, func() error {
		r := mustSend(t, c, ps[conflicts%2].URL(), request{Key: key})
		if r.Status != http.StatusConflict {
			return fmt.Errorf("duplicate %v into a 2.5s upstream call with lock_ttl 1s: %s, want 409", time.Since(up.Execs(key)[0].At), r)
		}
		conflicts++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	first := <-done
	ex := up.onlyExecution(t, key)
	if first.Status != http.StatusCreated || first.Body != ex.Body {
		t.Fatalf("first: %s, want 201 %q", first, ex.Body)
	}
	if r := mustSend(t, c, ps[1].URL(), request{Key: key}); !r.Replayed() || r.Body != ex.Body {
		t.Errorf("after completion: %s, want the replay of %q", r, ex.Body)
	}
}

// TestLeaseLostIsFenced cuts the store off from the proxy running a key for
// longer than lock_ttl, so its lease expires and another replica executes
// the key. The first owner's late completion must be refused (fencing),
// logged and counted in idempotency_proxy_lock_lost_total, and the newer
// record must be the one replayed.
func TestLeaseLostIsFenced(t *testing.T) {
	srv := redistest.Start(t)
	fp := faultnet.Start(t, srv.Addr())
	up := startUpstream(t)
	cfg := withPolicy(baseConfig(up, ""), "lock_ttl", "1s")
	cfg.RedisURL = "redis://" + fp.Addr() + "/0"
	owner := startProxy(t, "owner", cfg)
	cfg.RedisURL = srv.URL()
	other := startProxy(t, "other", cfg)
	c := newClient(t, 10*time.Second)
	const key = "lease-lost"

	done := make(chan reply, 1)
	go func() {
		done <- send(context.Background(), c, owner.URL(), request{Key: key, Header: map[string]string{hdrSleep: "2500ms"}})
	}()
	up.WaitCount(key, 1, 5*time.Second)
	fp.Refuse(true)
	fp.ResetAll()
	// Once the lease has expired in Redis, the other replica takes the key.
	var second reply
	_ = wait.SoonError(3*time.Second, func() error {
		if second = mustSend(t, c, other.URL(), request{Key: key}); second.Status == http.StatusConflict {
			return errors.New("409: the lease has not expired yet")
		}
		return nil
	}) // the status is checked below
	fp.Refuse(false)
	first := <-done
	ex := up.Execs(key)
	if len(ex) != 2 {
		t.Fatalf("executions = %d, want 2 (the lease expired while the store was unreachable)", len(ex))
	}
	if second.Status != http.StatusCreated || second.Body != ex[1].Body {
		t.Fatalf("second owner: %s, want 201 %q", second, ex[1].Body)
	}
	if first.Status != http.StatusCreated || first.Body != ex[0].Body {
		t.Errorf("first owner's client: %s, want its own response delivered (201 %q)", first, ex[0].Body)
	}
	waitMetric(t, owner, mLockLost, 1)
	if len(owner.logLines(map[string]string{"level": "WARN", "during": "renewal"}))+
		len(owner.logLines(map[string]string{"level": "WARN", "during": "complete"})) == 0 {
		t.Error("the lost lease was counted but no warning says so")
	}
	for _, p := range []*proxyProc{owner, other} {
		if r := mustSend(t, c, p.URL(), request{Key: key}); !r.Replayed() || r.Body != ex[1].Body {
			t.Errorf("replay via %s: %s %q, want the second owner's record %q", p.name, r, r.Body, ex[1].Body)
		}
	}
}

// waitMetric polls p's metric until it reaches at least want.
func waitMetric(t *testing.T, p *proxyProc, name string, want float64) {
	t.Helper()
	wait.SucceedsSoon(t, 5*time.Second, func() error {
		if got := metricSum(t, name, nil, p); got < want {
			return fmt.Errorf("%s on %s = %v, want >= %v", name, p.name, got, want)
		}
		return nil
	})
}
