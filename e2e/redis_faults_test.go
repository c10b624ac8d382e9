package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/faultnet"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
)

// openRoute is a route configured with on_store_error: fail_open; every
// other path is fail_closed (the default).
const openRoute = "/open/"

func withOpenRoute(cfg proxyConfig) proxyConfig {
	cfg.Routes = append(cfg.Routes, routeConfig{Match: openRoute, Keys: map[string]string{"on_store_error": "fail_open"}})
	return cfg
}

// TestRedisKilledAndRestarted kills Redis under load and brings it back:
// fail_closed requests get 503 with Retry-After and never reach the
// upstream, fail_open requests are forwarded and counted, /readyz follows
// the store, and protection resumes without restarting the proxies.
func TestRedisKilledAndRestarted(t *testing.T) {
	srv := redistest.Start(t)
	up := startUpstream(t)
	ps := startReplicas(t, 2, withOpenRoute(baseConfig(up, srv.URL())))
	c := newClient(t, 10*time.Second)

	// Load with a fresh key per request on both policies, across the kill.
	ctx, stop := context.WithCancel(context.Background())
	var (
		mu   sync.Mutex
		load = map[string]reply{} // by key
		wg   sync.WaitGroup
		// refused is signalled by the first fail_closed refusal.
		refused = make(chan struct{}, 1)
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000 && ctx.Err() == nil; i++ {
				path := "/v1/orders"
				if i%2 == 1 {
					path = openRoute + "comments"
				}
				key := fmt.Sprintf("load-%d-%d", w, i)
				r := send(context.Background(), c, ps[i%2].URL(), request{Path: path, Key: key, Header: map[string]string{hdrSleep: "20ms"}})
				mu.Lock()
				load[key] = r
				mu.Unlock()
				if r.Problem() == "store-unavailable" {
					select {
					case refused <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	up.WaitCount("load-0-3", 1, 5*time.Second)
	srv.Kill()
	for _, p := range ps {
		waitStatus(t, p.AdminURL()+"/readyz", http.StatusServiceUnavailable, 5*time.Second)
	}
	// Readiness notices a dead Redis within a ping; keep the load going
	// until requests started after the kill have been answered too.
	select {
	case <-refused:
	case <-time.After(5 * time.Second):
	}
	stop()
	wg.Wait()
	rejected := 0
	for key, r := range load {
		if r.Err != nil {
			t.Errorf("load key %s: %v", key, r.Err)
			continue
		}
		if r.Took > 3*time.Second {
			t.Errorf("load key %s: answered after %v, want a bounded answer", key, r.Took)
		}
		if r.Problem() == "store-unavailable" {
			rejected++
			checkStoreRejected(t, up, key, r)
		}
	}
	if rejected == 0 {
		t.Errorf("no load request was rejected while Redis was down (%d requests)", len(load))
	}

	t.Run("down", func(t *testing.T) { checkStoreDownPolicies(t, up, ps, "down") })

	srv.Restart()
	for _, p := range ps {
		waitStatus(t, p.AdminURL()+"/readyz", http.StatusOK, 10*time.Second)
	}
	t.Run("protection resumes", func(t *testing.T) {
		checkExactlyOnce(t, up, fireConcurrently(t, ps, "resumed", 8, 6, map[string]string{hdrSleep: "100ms"}))
	})
}

// checkStoreRejected asserts a fail_closed refusal: 503, Retry-After, and
// no upstream execution of its key.
func checkStoreRejected(t *testing.T, up *upstream, key string, r reply) {
	t.Helper()
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") != "2" {
		t.Errorf("key %s: store-unavailable reply %d with Retry-After %q, want 503 with Retry-After: 2",
			key, r.Status, r.Header.Get("Retry-After"))
	}
	if n := up.Count(key); n != 0 {
		t.Errorf("key %s: refused with 503 but executed %d times upstream", key, n)
	}
}

// checkStoreDownPolicies sends new keys to both policies while the store
// is unreachable: fail_closed answers 503 without calling the upstream,
// fail_open forwards every request and counts it as bypassed. Every answer
// comes within a bound, not after a hang.
func checkStoreDownPolicies(t *testing.T, up *upstream, ps []*proxyProc, tag string) {
	t.Helper()
	c := newClient(t, 10*time.Second)
	const n = 10
	bypassed := metricSum(t, mRequests, outcome("store_unavailable_bypassed"), ps...)
	refused := metricSum(t, mRequests, outcome("store_unavailable_rejected"), ps...)
	for i := range n {
		key := fmt.Sprintf("%s-closed-%d", tag, i)
		r := mustSend(t, c, ps[i%len(ps)].URL(), request{Key: key})
		if r.Problem() != "store-unavailable" {
			t.Errorf("fail_closed key %s: %s, want 503 store-unavailable", key, r)
		}
		checkStoreRejected(t, up, key, r)
		checkBounded(t, key, r)

		key = fmt.Sprintf("%s-open-%d", tag, i)
		r = mustSend(t, c, ps[i%len(ps)].URL(), request{Path: openRoute + "x", Key: key})
		if r.Status != http.StatusCreated || r.Replayed() {
			t.Errorf("fail_open key %s: %s, want the upstream's 201", key, r)
		}
		if got := up.Count(key); got != 1 {
			t.Errorf("fail_open key %s: %d executions, want 1", key, got)
		}
		checkBounded(t, key, r)
	}
	if got := metricSum(t, mRequests, outcome("store_unavailable_bypassed"), ps...) - bypassed; got != n {
		t.Errorf("store_unavailable_bypassed grew by %v, want %d", got, n)
	}
	if got := metricSum(t, mRequests, outcome("store_unavailable_rejected"), ps...) - refused; got != n {
		t.Errorf("store_unavailable_rejected grew by %v, want %d", got, n)
	}
}

// storeBound is the longest a request may take while the store misbehaves:
// a few store timeouts, far from a hang.
const storeBound = 2 * time.Second

func checkBounded(t *testing.T, key string, r reply) {
	t.Helper()
	if r.Took > storeBound {
		t.Errorf("key %s: answered after %v, want under %v", key, r.Took, storeBound)
	}
}

// TestRedisSlowAndReset puts a fault-injecting TCP proxy between the
// proxy and Redis: latency above store.redis.timeout and refused
// connections get the same policies as a dead Redis, within bounds; a
// connection reset mid-request does not lose the record.
func TestRedisSlowAndReset(t *testing.T) {
	srv := redistest.Start(t)
	fp := faultnet.Start(t, srv.Addr())
	up := startUpstream(t)
	cfg := withOpenRoute(baseConfig(up, "redis://"+fp.Addr()+"/0"))
	cfg.RedisTimeout = 200 * time.Millisecond
	ps := startReplicas(t, 1, cfg)
	c := newClient(t, 10*time.Second)
	admin := ps[0].AdminURL()

	t.Run("slow", func(t *testing.T) {
		fp.SetLatency(600 * time.Millisecond)
		waitStatus(t, admin+"/readyz", http.StatusServiceUnavailable, 5*time.Second)
		checkStoreDownPolicies(t, up, ps, "slow")
		fp.SetLatency(0)
		waitStatus(t, admin+"/readyz", http.StatusOK, 5*time.Second)
		checkExactlyOnce(t, up, fireConcurrently(t, ps, "after-slow", 4, 4, nil))
	})

	t.Run("reset mid-request", func(t *testing.T) {
		const key = "reset-mid-request"
		done := make(chan reply, 1)
		go func() {
			done <- send(context.Background(), c, ps[0].URL(), request{Key: key, Header: map[string]string{hdrSleep: "500ms"}})
		}()
		up.WaitCount(key, 1, 5*time.Second)
		fp.ResetAll()
		first := <-done
		ex := up.onlyExecution(t, key)
		if first.Status != http.StatusCreated || first.Body != ex.Body {
			t.Fatalf("first request: %s %q, want 201 %q", first, first.Body, ex.Body)
		}
		again := mustSend(t, c, ps[0].URL(), request{Key: key})
		if !again.Replayed() || again.Body != ex.Body {
			t.Errorf("retry: %s %q, want the replay of %q", again, again.Body, ex.Body)
		}
		up.onlyExecution(t, key)
	})

	t.Run("refused", func(t *testing.T) {
		fp.Refuse(true)
		fp.ResetAll()
		waitStatus(t, admin+"/readyz", http.StatusServiceUnavailable, 5*time.Second)
		checkStoreDownPolicies(t, up, ps, "refused")
		fp.Refuse(false)
		waitStatus(t, admin+"/readyz", http.StatusOK, 5*time.Second)
		checkExactlyOnce(t, up, fireConcurrently(t, ps, "after-refused", 4, 4, nil))
	})
}
