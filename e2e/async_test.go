package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// asyncConfig is a proxy whose routes answer Prefer: respond-async, all
// with the same async_secret, with a lease shorter than the upstream's
// work: only renewal keeps the key locked while the call runs detached.
func asyncConfig(up *upstream) proxyConfig {
	return proxyConfig{
		Upstream:        up.URL(),
		UpstreamTimeout: time.Second,
		MaxExecution:    30 * time.Second,
		ShutdownTimeout: 10 * time.Second,
		Defaults:        map[string]string{"lock_ttl": "2s", "ttl": "5m", "async": "allow"},
		Env:             []string{"IDEMPOTENCY_PROXY_ASYNC_SECRET=e2e-async-secret-0123456789abcdef"},
	}
}

// pollUntilAnswered GETs the status URL loc through bases in turn, with
// the scope header alice sent, honouring Retry-After, while it answers
// 202, and returns the first other reply.
func pollUntilAnswered(t *testing.T, c *http.Client, bases []string, loc string) reply {
	t.Helper()
	var r reply
	i := 0
	wait.SucceedsSoon(t, 30*time.Second, func() error {
		r = mustSend(t, c, bases[i%len(bases)], request{Method: http.MethodGet, Path: loc, Header: alice})
		i++
		if r.Status == http.StatusAccepted {
			if r.Header.Get("Retry-After") == "" {
				t.Fatalf("202 from the status URL without Retry-After: %s", r)
			}
			return fmt.Errorf("still running: %s", r)
		}
		return nil
	})
	return r
}

var alice = map[string]string{"Authorization": "Bearer alice"}

// A long upstream behind Prefer: respond-async: the client gets 202 with
// a status URL while the upstream still holds the request; the status URL
// gives 202 until the call ends and then the upstream's own bytes, through
// any replica on a shared store and after a restart on a durable one; a
// retry while it runs gets the same 202; a poll with another Authorization
// gets 404; the upstream executes the request once and never sees a poll.
func TestRespondAsyncAnswersAtOnceAndTheStatusURLGivesTheOneAnswer(t *testing.T) {
	for _, kind := range []string{"redis", "postgres", "file"} {
		t.Run(kind, func(t *testing.T) {
			up := startUpstream(t)
			t.Cleanup(up.Unhold)
			cfg := asyncConfig(up)
			n := 2
			switch kind {
			case "redis":
				cfg.RedisURL = redistest.Start(t).URL()
			case "postgres":
				cfg.PostgresURL = pgtest.Start(t).URL()
			case "file":
				cfg.FilePath, n = t.TempDir(), 1 // one process per directory
			}
			ps := startReplicas(t, n, cfg)
			c := newClient(t, 20*time.Second)
			const key = "monthly-report"
			hdr := map[string]string{"Prefer": "respond-async", hdrHold: "1", "Authorization": "Bearer alice"}
			rq := request{Key: key, Body: `{"month":"2026-12"}`, Header: hdr}

			// The upstream holds the request until Unhold: a 202 now came
			// before the upstream answered, whatever the machine's speed.
			first := mustSend(t, c, ps[0].URL(), rq)
			if first.Status != http.StatusAccepted || first.Header.Get("Preference-Applied") != "respond-async" || first.Header.Get("Retry-After") == "" {
				t.Fatalf("first: %s, want 202 with Preference-Applied and Retry-After", first)
			}
			t.Logf("202 after %v, the upstream still holding the request", first.Took)
			loc := first.Header.Get("Location")
			if !strings.HasPrefix(loc, "/.well-known/idempotency/") || strings.Contains(loc, key) {
				t.Fatalf("Location %q: want a status URL under /.well-known/idempotency/ without the key", loc)
			}
			up.WaitCount(key, 1, 10*time.Second)
			// The access line says what the client got (buffered: within 1s).
			waitLog(t, ps[0], `"status":202,"outcome":"accepted_async"`)

			for _, p := range ps {
				if r := mustSend(t, c, p.URL(), rq); r.Status != http.StatusAccepted || r.Header.Get("Location") != loc {
					t.Fatalf("retry through %s while running: %s Location %q, want the same 202 at %q", p.name, r, r.Header.Get("Location"), loc)
				}
				if r := mustSend(t, c, p.URL(), request{Method: http.MethodGet, Path: loc, Header: alice}); r.Status != http.StatusAccepted {
					t.Fatalf("status URL through %s while running: %s, want 202", p.name, r)
				}
			}
			bob := map[string]string{"Authorization": "Bearer bob"}
			if r := mustSend(t, c, ps[len(ps)-1].URL(), request{Method: http.MethodGet, Path: loc, Header: bob}); r.Status != http.StatusNotFound || r.Problem() != "status-unknown" {
				t.Fatalf("status URL polled with another Authorization: %s, want 404 status-unknown", r)
			}

			up.Unhold()
			done := pollUntilAnswered(t, c, bases(ps), loc)
			ex := up.onlyExecution(t, key)
			if done.Status != http.StatusCreated || !done.Replayed() || done.Body != ex.Body {
				t.Fatalf("status URL once recorded: %s %q, want the upstream's own 201 %q replayed", done, done.Body, ex.Body)
			}
			if kind == "file" {
				ps[0].Restart()
			}
			for _, p := range ps {
				r := mustSend(t, c, p.URL(), request{Method: http.MethodGet, Path: loc, Header: alice})
				if r.Status != http.StatusCreated || r.Body != ex.Body {
					t.Errorf("status URL through %s: %s %q, want the recorded 201 %q", p.name, r, r.Body, ex.Body)
				}
				if r := mustSend(t, c, p.URL(), request{Method: http.MethodGet, Path: loc, Header: bob}); r.Status != http.StatusNotFound {
					t.Errorf("status URL through %s with another Authorization, once recorded: %s, want 404", p.name, r)
				}
			}
			if r := mustSend(t, c, ps[0].URL(), rq); r.Status != http.StatusCreated || !r.Replayed() || r.Body != ex.Body {
				t.Errorf("retry with the key once recorded: %s, want the recorded 201 replayed", r)
			}
			if got := up.Total(); got != 1 {
				t.Errorf("upstream received %d requests, want 1: the status URL is never forwarded", got)
			}
			if kind != "file" { // a restarted process starts its counters again
				if got := metricSum(t, "idempotency_proxy_requests_total", outcome("accepted_async"), ps...); got != float64(1+n) {
					t.Errorf("requests counted accepted_async = %v, want %d (the first and each retry while running)", got, 1+n)
				}
			}
		})
	}
}
