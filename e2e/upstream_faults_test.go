package e2e

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
)

// withPolicy returns cfg with one more key under defaults.
func withPolicy(cfg proxyConfig, key, value string) proxyConfig {
	d := map[string]string{key: value}
	for k, v := range cfg.Defaults {
		if k != key {
			d[k] = v
		}
	}
	cfg.Defaults = d
	return cfg
}

// TestUpstreamKilledMidRequest drops the upstream connection after the
// request was read and acted on: the outcome is ambiguous, and
// on_upstream_error decides. release: the retry executes again
// (at-least-once). keep: the retry replays the 502 (at-most-once).
func TestUpstreamKilledMidRequest(t *testing.T) {
	srv := redistest.Start(t)
	up := startUpstream(t)
	c := newClient(t, 10*time.Second)
	for _, tc := range []struct {
		policy    string
		wantExecs int
	}{
		{policy: "release", wantExecs: 2},
		{policy: "keep", wantExecs: 1},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			p := startProxy(t, tc.policy, withPolicy(baseConfig(up, srv.URL()), "on_upstream_error", tc.policy))
			key := "dropped-" + tc.policy
			first := mustSend(t, c, p.URL(), request{Key: key, Header: map[string]string{hdrDrop: "1"}})
			if first.Status != http.StatusBadGateway || first.Problem() != "upstream-failed" {
				t.Fatalf("dropped request: %s, want 502 upstream-failed", first)
			}
			retry := mustSend(t, c, p.URL(), request{Key: key})
			if got := up.Count(key); got != tc.wantExecs {
				t.Fatalf("executions after the retry = %d, want %d", got, tc.wantExecs)
			}
			switch tc.policy {
			case "release":
				ex := up.Execs(key)[1]
				if retry.Status != http.StatusCreated || retry.Replayed() || retry.Body != ex.Body {
					t.Errorf("retry: %s %q, want a fresh 201 %q", retry, retry.Body, ex.Body)
				}
				again := mustSend(t, c, p.URL(), request{Key: key})
				if !again.Replayed() || again.Body != ex.Body {
					t.Errorf("second retry: %s %q, want the replay of %q", again, again.Body, ex.Body)
				}
			case "keep":
				if retry.Status != http.StatusBadGateway || !retry.Replayed() || retry.Body != first.Body {
					t.Errorf("retry: %s %q, want the replayed 502 %q", retry, retry.Body, first.Body)
				}
			}
			if got := up.Count(key); got != tc.wantExecs {
				t.Errorf("executions at the end = %d, want %d", got, tc.wantExecs)
			}
		})
	}
}

// TestUpstreamNotListening: a dial error means nothing was sent, so under
// either on_upstream_error policy the key is released with a 502
// upstream-unreachable, and the retry executes once when the upstream is back.
func TestUpstreamNotListening(t *testing.T) {
	srv := redistest.Start(t)
	up := startUpstream(t)
	c := newClient(t, 10*time.Second)
	for _, policy := range []string{"release", "keep"} {
		t.Run(policy, func(t *testing.T) {
			p := startProxy(t, policy, withPolicy(baseConfig(up, srv.URL()), "on_upstream_error", policy))
			key := "unreachable-" + policy
			up.Kill()
			first := mustSend(t, c, p.URL(), request{Key: key})
			if first.Status != http.StatusBadGateway || first.Problem() != "upstream-unreachable" {
				t.Fatalf("upstream down: %s, want 502 upstream-unreachable", first)
			}
			up.Restart()
			retry := mustSend(t, c, p.URL(), request{Key: key})
			ex := up.onlyExecution(t, key)
			if retry.Status != http.StatusCreated || retry.Replayed() || retry.Body != ex.Body {
				t.Errorf("retry: %s %q, want a fresh 201 %q", retry, retry.Body, ex.Body)
			}
			again := mustSend(t, c, p.URL(), request{Key: key})
			if !again.Replayed() || again.Body != ex.Body {
				t.Errorf("second retry: %s %q, want the replay of %q", again, again.Body, ex.Body)
			}
			up.onlyExecution(t, key)
		})
	}
}

// TestUpstreamStatuses: release_statuses are delivered but release the key;
// every other status, 5xx included, is recorded and replayed; a body over
// max_response_body is delivered in full and replayed without its body.
func TestUpstreamStatuses(t *testing.T) {
	srv := redistest.Start(t)
	up := startUpstream(t)
	p := startProxy(t, "statuses", withPolicy(baseConfig(up, srv.URL()), "max_response_body", "1KiB"))
	c := newClient(t, 10*time.Second)
	for _, tc := range []struct {
		name      string
		first     map[string]string
		wantExecs int // after a retry without the first request's test headers
	}{
		{name: "503 released", first: map[string]string{hdrStatus: "503"}, wantExecs: 2},
		{name: "429 released", first: map[string]string{hdrStatus: "429"}, wantExecs: 2},
		{name: "500 recorded", first: map[string]string{hdrStatus: "500"}, wantExecs: 1},
		{name: "body over max_response_body", first: map[string]string{hdrPad: "4096"}, wantExecs: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "status-" + strings.ReplaceAll(tc.name, " ", "-")
			first := mustSend(t, c, p.URL(), request{Key: key, Header: tc.first})
			want := up.Execs(key)[0]
			if first.Body != want.Body || first.Replayed() {
				t.Fatalf("first: %s with %d bytes, want the upstream's %d bytes", first, len(first.Body), len(want.Body))
			}
			retry := mustSend(t, c, p.URL(), request{Key: key})
			if got := up.Count(key); got != tc.wantExecs {
				t.Fatalf("executions = %d, want %d", got, tc.wantExecs)
			}
			switch {
			case tc.wantExecs == 2:
				if retry.Status != http.StatusCreated || retry.Replayed() {
					t.Errorf("retry after a release status: %s, want a fresh 201", retry)
				}
			case tc.first[hdrPad] != "":
				if !retry.Replayed() || retry.Header.Get("Idempotent-Body-Omitted") != "true" ||
					retry.Body != "" || retry.Header.Get("Content-Length") != "0" || retry.Status != first.Status {
					t.Errorf("retry: %s, Body-Omitted %q, Content-Length %q, %d body bytes; want status %d replayed with an omitted empty body",
						retry, retry.Header.Get("Idempotent-Body-Omitted"), retry.Header.Get("Content-Length"), len(retry.Body), first.Status)
				}
			default:
				if !retry.Replayed() || retry.Status != first.Status || retry.Body != first.Body {
					t.Errorf("retry: %s %q, want the replay of %d %q", retry, retry.Body, first.Status, first.Body)
				}
			}
		})
	}
}

// TestClientGivesUp: a client whose timeout is shorter than the upstream
// does not cancel the execution; it runs once, is recorded, and the
// client's retry (409 while in flight) ends with the replay.
func TestClientGivesUp(t *testing.T) {
	srv := redistest.Start(t)
	up := startUpstream(t)
	p := startProxy(t, "giveup", baseConfig(up, srv.URL()))
	const key = "impatient"
	slow := map[string]string{hdrSleep: "1500ms"}

	impatient := newClient(t, 300*time.Millisecond)
	first := send(context.Background(), impatient, p.URL(), request{Key: key, Header: slow})
	var ue interface{ Timeout() bool }
	if !errors.As(first.Err, &ue) || !ue.Timeout() {
		t.Fatalf("first request: %s, want a client timeout", first)
	}
	c := newClient(t, 10*time.Second)
	inFlight := mustSend(t, c, p.URL(), request{Key: key, Header: slow})
	if inFlight.Status != http.StatusConflict || inFlight.Problem() != "in-flight" || inFlight.Header.Get("Retry-After") != "1" {
		t.Errorf("retry while in flight: %s (Retry-After %q), want 409 in-flight with Retry-After: 1",
			inFlight, inFlight.Header.Get("Retry-After"))
	}
	rt := retrier{Client: c, Bases: []string{p.URL()}, MaxAttempts: 100, MaxWait: 100 * time.Millisecond, Rand: testRand(1)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := rt.Do(ctx, request{Key: key, Header: slow})
	last := got[len(got)-1]
	ex := up.onlyExecution(t, key)
	if !last.Replayed() || last.Status != http.StatusCreated || last.Body != ex.Body {
		t.Errorf("retry after %d attempts: %s %q, want the replay of %q", len(got), last, last.Body, ex.Body)
	}
	if n, _ := strconv.Atoi(last.Header.Get("X-Exec")); n != ex.Seq {
		t.Errorf("replayed X-Exec = %d, want %d", n, ex.Seq)
	}
}
