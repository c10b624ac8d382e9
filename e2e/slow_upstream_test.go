package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/faultnet"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// slowConfig is a proxy whose clients wait 1s for an upstream that takes
// longer, with a lease shorter than the upstream: only renewal keeps the
// key locked while the call goes on.
func slowConfig(up *upstream, redisURL string) proxyConfig {
	cfg := proxyConfig{
		Upstream:        up.URL(),
		UpstreamTimeout: time.Second,
		MaxExecution:    10 * time.Second,
		ShutdownTimeout: 10 * time.Second,
		RedisURL:        redisURL,
		Memory:          redisURL == "",
		Defaults:        map[string]string{"lock_ttl": "1s", "ttl": "5m"},
	}
	return cfg
}

// untilAnswered resends rq, rotating over bases and honouring Retry-After,
// while the key is in flight (409), and returns the first other reply.
func untilAnswered(t *testing.T, c *http.Client, bases []string, rq request) reply {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		r := mustSend(t, c, bases[i%len(bases)], rq)
		if r.Status != http.StatusConflict {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %q still in flight after 20s: %s", rq.Key, r)
		}
		wait, err := strconv.Atoi(r.Header.Get("Retry-After"))
		if err != nil || wait < 1 {
			t.Fatalf("409 without a usable Retry-After: %s", r)
		}
		time.Sleep(time.Duration(wait) * time.Second) // what Retry-After asks a client to do
	}
}

// A 3s upstream behind a 1s upstream.timeout executes once: its client gets
// 504 upstream-timeout, a retry during the call gets 409 through any
// replica, and a retry after it gets the upstream's own answer.
func TestSlowUpstreamIsWaitedFor(t *testing.T) {
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			up := startUpstream(t)
			var ps []*proxyProc
			if kind == "memory" {
				ps = startReplicas(t, 1, slowConfig(up, ""))
			} else {
				ps = startReplicas(t, 2, slowConfig(up, redistest.Start(t).URL()))
			}
			c := newClient(t, 10*time.Second)
			const key = "slow-upstream"
			rq := request{Key: key, Body: `{"amount":100}`, Header: map[string]string{hdrSleep: "3s"}}

			first := mustSend(t, c, ps[0].URL(), rq)
			if first.Status != http.StatusGatewayTimeout || first.Problem() != "upstream-timeout" || first.Header.Get("Retry-After") == "" {
				t.Fatalf("first: %s, want 504 upstream-timeout with Retry-After", first)
			}
			if first.Took >= 3*time.Second {
				t.Errorf("first answered after %v: the client waited for the upstream, not upstream.timeout", first.Took)
			}
			for _, p := range ps {
				if r := mustSend(t, c, p.URL(), request{Key: key, Body: rq.Body}); r.Status != http.StatusConflict || r.Problem() != "in-flight" {
					t.Fatalf("retry through %s during the call: %s, want 409 in-flight", p.name, r)
				}
			}
			if got := metricSum(t, "idempotency_proxy_detached_requests", nil, ps[0]); got != 1 {
				t.Errorf("idempotency_proxy_detached_requests = %v during the call, want 1", got)
			}

			r := untilAnswered(t, c, bases(ps), request{Key: key, Body: rq.Body})
			ex := up.onlyExecution(t, key)
			if r.Status != http.StatusCreated || !r.Replayed() || r.Body != ex.Body {
				t.Fatalf("retry after the call: %s %q, want the upstream's own 201 %q replayed", r, r.Body, ex.Body)
			}
			// The record is written before the detached call's end is
			// counted and logged; the log line comes last.
			waitLog(t, ps[0], `"msg":"detached upstream call ended"`)
			if got := metricSum(t, "idempotency_proxy_requests_total", outcome("upstream_timeout"), ps...); got != 1 {
				t.Errorf("requests counted upstream_timeout = %v, want 1", got)
			}
			if got := metricSum(t, "idempotency_proxy_detached_requests_total", outcome("executed"), ps...); got != 1 {
				t.Errorf("detached calls ended executed = %v, want 1", got)
			}
			if got := metricSum(t, "idempotency_proxy_detached_requests", nil, ps...); got != 0 {
				t.Errorf("idempotency_proxy_detached_requests = %v after the call, want 0", got)
			}
		})
	}
}

// When upstream.max_execution passes, the call is cancelled and
// on_upstream_error applies: keep records a 502 that retries get, release
// frees the key for a retry to execute again.
func TestMaxExecutionAppliesOnUpstreamError(t *testing.T) {
	for _, policy := range []string{"keep", "release"} {
		t.Run(policy, func(t *testing.T) {
			up := startUpstream(t)
			t.Cleanup(up.Unhold)
			cfg := slowConfig(up, "")
			cfg.MaxExecution = 2 * time.Second
			cfg.Defaults["on_upstream_error"] = policy
			p := startProxy(t, "proxy", cfg)
			c := newClient(t, 10*time.Second)
			const key = "never-answers"

			first := mustSend(t, c, p.URL(), request{Key: key, Header: map[string]string{hdrHold: "1"}})
			if first.Status != http.StatusGatewayTimeout {
				t.Fatalf("first: %s, want 504", first)
			}
			r := untilAnswered(t, c, []string{p.URL()}, request{Key: key})
			switch policy {
			case "keep":
				if r.Status != http.StatusBadGateway || !r.Replayed() || !strings.Contains(r.Body, "max_execution") {
					t.Fatalf("retry after max_execution under keep: %s %q, want the recorded 502 naming max_execution", r, r.Body)
				}
				up.onlyExecution(t, key)
			case "release":
				if r.Status != http.StatusCreated || r.Replayed() {
					t.Fatalf("retry after max_execution under release: %s, want a fresh execution", r)
				}
				if n := up.Count(key); n != 2 {
					t.Fatalf("executions = %d, want 2 (release is at-least-once)", n)
				}
			}
			waitLog(t, p, `"msg":"detached upstream call ended"`) // after the record, and after the count
			if got := metricSum(t, "idempotency_proxy_detached_requests_total", outcome("upstream_error"), p); got != 1 {
				t.Errorf("detached calls ended upstream_error = %v, want 1", got)
			}
		})
	}
}

// A request still running when shutdown_timeout passes keeps its lease:
// its client is told the proxy was shutting down, and the restarted proxy
// answers its retry 409 instead of executing it again. /readyz answers 503
// from the signal on, while /healthz stays 200 until exit.
//
// The drain lasts shutdown_timeout, since the held request never ends by
// itself: the checks made while draining are bounded by it and must see the
// request still running; lock_ttl is far above the drain and the restart, so
// that the retry meets the lease however slow the machine.
func TestShutdownLeavesRunningKeyLocked(t *testing.T) {
	up := startUpstream(t)
	t.Cleanup(up.Unhold)
	cfg := slowConfig(up, redistest.Start(t).URL())
	const drain = 8 * time.Second
	cfg.UpstreamTimeout, cfg.MaxExecution, cfg.ShutdownTimeout = 10*drain, 10*drain, drain
	cfg.Defaults["lock_ttl"] = (20 * drain).String()
	p := startProxy(t, "proxy", cfg)
	c := newClient(t, 5*drain)
	const key = "cut-by-shutdown"

	done := make(chan reply, 1)
	go func() {
		done <- send(context.Background(), c, p.URL(), request{Key: key, Header: map[string]string{hdrHold: "1"}})
	}()
	up.WaitCount(key, 1, 30*time.Second)
	signalled := time.Now()
	p.Signal(syscall.SIGTERM)

	admin := &http.Client{Timeout: drain}
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if err := pollStatus(ctx, p.AdminURL()+"/readyz", http.StatusServiceUnavailable, nil); err != nil {
		t.Fatalf("/readyz after SIGTERM: %v, want 503 while draining", err)
	}
	if body := getBody(t, admin, p.AdminURL()+"/readyz"); !strings.Contains(body, "draining") {
		t.Errorf("/readyz body while draining = %q, want it to say draining", body)
	}
	if res, err := admin.Get(p.AdminURL() + "/healthz"); err != nil || res.StatusCode != http.StatusOK {
		t.Errorf("/healthz while draining: %v %v, want 200", res, err)
	} else {
		res.Body.Close()
	}
	select {
	case first := <-done:
		t.Fatalf("the request ended (%s) before the checks of the drain were done, %v after SIGTERM with shutdown_timeout %v: they did not see the drain",
			first, time.Since(signalled).Round(time.Millisecond), drain)
	default:
	}

	first := <-done
	if first.Status != http.StatusBadGateway || !strings.Contains(first.Body, "The proxy was shutting down") {
		t.Fatalf("request cut by the shutdown: %s %q, want a 502 saying the proxy was shutting down", first, first.Body)
	}
	if code, ok := p.Wait(30 * time.Second); !ok || code != 0 {
		t.Fatalf("after SIGTERM: exited %v with code %d, want 0", ok, code)
	}
	p.Restart()
	if r := mustSend(t, c, p.URL(), request{Key: key}); r.Status != http.StatusConflict || r.Problem() != "in-flight" {
		t.Fatalf("retry on the restarted proxy: %s, want 409 in-flight (the key stays locked until lock_ttl)", r)
	}
	up.onlyExecution(t, key)
}

// getBody returns the body of a GET of url.
func getBody(t *testing.T, c *http.Client, url string) string {
	t.Helper()
	res, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	var b strings.Builder
	_, _ = io.Copy(&b, res.Body)
	return b.String()
}

// A response whose recording is still being retried in the background
// when SIGTERM arrives is recorded before the proxy exits: the drain waits
// for it (within shutdown_timeout), and the restarted proxy replays it.
func TestShutdownWaitsForBackgroundRecording(t *testing.T) {
	srv := redistest.Start(t)
	fault := faultnet.Start(t, srv.Addr())
	up := startUpstream(t)
	t.Cleanup(up.Unhold)
	cfg := baseConfig(up, "redis://"+fault.Addr()+"/0")
	cfg.Defaults["lock_ttl"] = "30s"
	cfg.ShutdownTimeout = 20 * time.Second
	p := startProxy(t, "proxy", cfg)
	c := newClient(t, 20*time.Second)
	const key = "recorded-after-the-response"

	done := make(chan reply, 1)
	go func() {
		done <- send(context.Background(), c, p.URL(), request{Key: key, Header: map[string]string{hdrHold: "1"}})
	}()
	up.WaitCount(key, 1, 5*time.Second)
	// The store goes away while the upstream works: the response reaches
	// its client, and its recording is retried in the background.
	fault.Refuse(true)
	fault.ResetAll()
	up.Unhold()
	first := <-done
	ex := up.onlyExecution(t, key)
	if first.Status != http.StatusCreated || first.Body != ex.Body {
		t.Fatalf("first: %s, want the upstream's 201 delivered", first)
	}
	waitLog(t, p, "could not record response yet")

	p.Signal(syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := pollStatus(ctx, p.AdminURL()+"/readyz", http.StatusServiceUnavailable, nil); err != nil {
		t.Errorf("/readyz after SIGTERM: %v, want 503 while the drain waits for the record", err)
	}
	// Still draining while the store refuses: a proxy that did not wait for
	// the record would be gone by now, and one about to go must not get the
	// chance to write it once the store is back.
	if code, exited := p.Wait(2 * time.Second); exited {
		t.Fatalf("after SIGTERM: exited with code %d while the record was still being retried, want the drain to wait for it", code)
	}
	fault.Refuse(false) // the store is back: the record can be written
	if code, ok := p.Wait(15 * time.Second); !ok || code != 0 {
		t.Fatalf("after SIGTERM: exited %v with code %d, want 0", ok, code)
	}
	p.Restart()
	r := mustSend(t, c, p.URL(), request{Key: key})
	if !r.Replayed() || r.Body != ex.Body {
		t.Fatalf("retry after the restart: %s %q, want the replay of %q recorded during the drain", r, r.Body, ex.Body)
	}
	up.onlyExecution(t, key)
}

// waitLog waits up to 10s for a log line of p containing s.
func waitLog(t *testing.T, p *proxyProc, s string) {
	t.Helper()
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if !strings.Contains(p.Logs(), s) {
			return fmt.Errorf("proxy %s has not logged %q", p.name, s)
		}
		return nil
	})
}
