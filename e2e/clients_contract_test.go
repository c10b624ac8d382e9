package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/client"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/contract"
)

// The three clients run the same scenarios against the built proxy: every
// row of clients/contract.json as the proxy answers it, a lost answer, an
// attempt timeout while the first attempt runs, a reused key, and (for the
// clients that name operations) a resumed operation and a double submit.

func TestJavaScriptClientFollowsTheContract(t *testing.T) {
	node := tool(t, "node")
	h := startHarness(t)
	runClientTests(t, h, "clients/js", node, "--test")
}

func TestPythonClientFollowsTheContract(t *testing.T) {
	python := tool(t, "python3")
	h := startHarness(t)
	runClientTests(t, h, "clients/python", python, "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
}

func TestGoClientFollowsTheContract(t *testing.T) {
	h := startHarness(t)
	var n int
	newID := func() string { n++; return "go-" + strconv.Itoa(n) }

	for _, row := range h.contract.Problems {
		if !row.On(contract.ListenerProxy) {
			continue
		}
		t.Run("answer "+row.Type, func(t *testing.T) {
			id := newID()
			var retries []client.Retry
			c := &client.Client{MaxAttempts: 3, BaseDelay: 20 * time.Millisecond, MaxDelay: 50 * time.Millisecond,
				OnRetry: func(r client.Retry) { retries = append(retries, r) }}
			resp, err := c.Do(t.Context(), harnessPost(t, h.proxy+"/answer/"+row.Type+"/"+id, "{}"))
			got := h.count(t, id)
			switch row.Client {
			case contract.Retry:
				if err != nil {
					t.Fatalf("Do: %v", err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated || got.Hits != 2 || len(retries) != 1 {
					t.Fatalf("status %d after %d hits and %d retries, want 201 after 2 and 1", resp.StatusCode, got.Hits, len(retries))
				}
				r := retries[0]
				if r.StatusCode != row.Status || r.Problem == nil || r.Problem.Type != h.contract.ProblemBase+row.Type {
					t.Errorf("retried on %d %v, want %d %s", r.StatusCode, r.Problem, row.Status, row.Type)
				}
				if row.RetryAfter && r.Delay != c.MaxDelay {
					t.Errorf("waited %v after Retry-After: 1, want MaxDelay %v", r.Delay, c.MaxDelay)
				}
				if !row.RetryAfter && r.Delay >= c.BaseDelay {
					t.Errorf("waited %v, want a jittered backoff under %v", r.Delay, c.BaseDelay)
				}
			case contract.Stop:
				var pe *client.ProblemError
				var me *client.MismatchError
				switch {
				case row.Error == "payload-mismatch" && !errors.As(err, &me):
					t.Errorf("err = %v, want a *MismatchError", err)
				case row.Error == "key-expired" && (!errors.As(err, &pe) || !errors.Is(err, client.ErrKeyExpired)):
					t.Errorf("err = %v, want a *ProblemError wrapping ErrKeyExpired", err)
				case row.Error == "" && (!errors.As(err, &pe) || pe.StatusCode != row.Status):
					t.Errorf("err = %v, want a *ProblemError with status %d", err, row.Status)
				}
				if got.Hits != 1 {
					t.Errorf("%d hits, want 1: a stop answer is not retried", got.Hits)
				}
			}
		})
	}

	t.Run("lost answer", func(t *testing.T) {
		id := newID()
		c := &client.Client{BaseDelay: 10 * time.Millisecond}
		resp, err := c.Do(t.Context(), harnessPost(t, h.front+"/lose/"+id, `{"amount":1}`))
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
		resp.Body.Close()
		if got := h.count(t, id); got.Executions != 1 || !client.Replayed(resp) {
			t.Errorf("%d executions, replayed %v; want 1, replayed", got.Executions, client.Replayed(resp))
		}
	})

	t.Run("attempt timeout while in flight", func(t *testing.T) {
		id := newID()
		var once sync.Once
		c := &client.Client{MaxAttempts: 20, BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond,
			AttemptTimeout: 300 * time.Millisecond,
			OnRetry: func(r client.Retry) {
				// The first attempt timed out and the second found it
				// still running: now let it finish.
				if r.Problem != nil && r.Problem.Type == client.ProblemInFlight {
					once.Do(func() { h.release(t, id) })
				}
			}}
		resp, err := c.Do(t.Context(), harnessPost(t, h.proxy+"/slow/"+id, `{"amount":2}`))
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
		resp.Body.Close()
		got := h.count(t, id)
		if got.Executions != 1 || !client.Replayed(resp) {
			t.Errorf("%d executions, replayed %v; want 1, replayed", got.Executions, client.Replayed(resp))
		}
	})

	t.Run("upstream timeout, then the running call's answer", func(t *testing.T) {
		id := newID()
		var seen []string
		var once sync.Once
		c := &client.Client{MaxAttempts: 20, BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond,
			OnRetry: func(r client.Retry) {
				if r.Problem != nil {
					seen = append(seen, r.Problem.Type)
				}
				if r.Problem != nil && r.Problem.Type == client.ProblemInFlight {
					once.Do(func() { h.release(t, id) })
				}
			}}
		resp, err := c.Do(t.Context(), harnessPost(t, h.slowProxy+"/slow/"+id, `{"amount":5}`))
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
		resp.Body.Close()
		if len(seen) < 2 || seen[0] != client.ProblemUpstreamTimeout || seen[1] != client.ProblemInFlight {
			t.Errorf("retried on %q, want upstream-timeout, then in-flight", seen)
		}
		if got := h.count(t, id); got.Executions != 1 || !client.Replayed(resp) {
			t.Errorf("%d executions, replayed %v; want 1, replayed", got.Executions, client.Replayed(resp))
		}
	})

	t.Run("attempts run out", func(t *testing.T) {
		id := newID()
		c := &client.Client{MaxAttempts: 3, BaseDelay: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond}
		_, err := c.Do(t.Context(), harnessPost(t, h.proxy+"/always/store-unavailable/"+id, "{}"))
		var re *client.RetryError
		if !errors.As(err, &re) || !errors.Is(err, client.ErrAttemptsExhausted) {
			t.Fatalf("err = %v, want a *RetryError wrapping ErrAttemptsExhausted", err)
		}
		if re.Attempts != 3 || re.StatusCode != http.StatusServiceUnavailable || re.Problem == nil || re.Problem.Type != client.ProblemStoreUnavailable {
			t.Errorf("gave up after %d attempts on %d %v, want 3 on 503 store-unavailable", re.Attempts, re.StatusCode, re.Problem)
		}
		if got := h.count(t, id); got.Hits != 3 || len(slices.Compact(got.Keys)) != 1 {
			t.Errorf("%d hits with keys %q, want 3 with one key", got.Hits, got.Keys)
		}
	})

	t.Run("key reused with another payload", func(t *testing.T) {
		id := newID()
		c := &client.Client{}
		ctx := client.WithKey(t.Context(), "reused-"+id)
		resp, err := c.Do(ctx, harnessPost(t, h.proxy+"/charge/"+id, `{"amount":1}`))
		if err != nil {
			t.Fatalf("first Do: %v", err)
		}
		resp.Body.Close()
		_, err = c.Do(ctx, harnessPost(t, h.proxy+"/charge/"+id, `{"amount":2}`))
		if !errors.Is(err, client.ErrKeyReused) {
			t.Errorf("second Do: err = %v, want ErrKeyReused", err)
		}
		if got := h.count(t, id); got.Executions != 1 {
			t.Errorf("%d executions, want 1", got.Executions)
		}
	})
}

func harnessPost(t *testing.T, url, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}

func (h *harness) count(t *testing.T, id string) harnessOp {
	t.Helper()
	resp, err := http.Get(h.upstream + "/count/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var o harnessOp
	if err := json.NewDecoder(resp.Body).Decode(&o); err != nil {
		t.Fatal(err)
	}
	return o
}

func (h *harness) release(t *testing.T, id string) {
	resp, err := http.Post(h.upstream+"/release/"+id, "text/plain", nil)
	if err != nil {
		t.Error(err)
		return
	}
	resp.Body.Close()
}
