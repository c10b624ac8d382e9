package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/proxy"
)

// These tests run the client against the real proxy handler and a scripted
// upstream, and check the end-to-end promise: however the first attempts
// fail, the operation executes upstream exactly once and the caller gets
// that execution's response.

// upstream answers its n-th call (from 0) with steps[min(n, len-1)].
type upstream struct {
	steps      []http.HandlerFunc
	calls      atomic.Int32
	executions atomic.Int32
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := int(u.calls.Add(1)) - 1
	u.steps[min(n, len(u.steps)-1)](w, r)
}

// execute is the step that performs the operation: it answers 201 with a
// body naming the call, so a test can tell which execution a caller got.
func (u *upstream) execute(w http.ResponseWriter, r *http.Request) {
	n := u.executions.Add(1)
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, "execution %d of %s", n, body)
}

func status(code int, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
		fmt.Fprintf(w, "status %d\n", code)
	}
}

// hangUp drops the connection before any response: the proxy sees a failure
// after the request was sent.
func hangUp(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	_ = conn.Close()
}

func startUpstream(t *testing.T, u *upstream) string {
	t.Helper()
	srv := httptest.NewServer(u)
	t.Cleanup(srv.Close)
	return srv.URL
}

func newCharge(t *testing.T, base, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/charges", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestDoAgainstProxyRetriesUntilOneExecution(t *testing.T) {
	now := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		// release is added to the proxy's release_statuses.
		release []int
		// steps are the upstream's answers, call by call.
		steps []string
		// lose is how many responses the client's connection loses.
		lose         int
		wantStatuses []int
		wantCalls    int32
		wantReplayed bool
		wantStatus   int
		// wantDelays, if set, are the exact waits between attempts.
		wantDelays []time.Duration
	}{
		{
			name:         "upstream drops the connection",
			steps:        []string{"hangup", "execute"},
			wantStatuses: []int{502, 201}, wantCalls: 2, wantStatus: 201,
		},
		{
			name:         "503 with Retry-After seconds",
			steps:        []string{"503-seconds", "execute"},
			wantStatuses: []int{503, 201}, wantCalls: 2, wantStatus: 201,
			wantDelays: []time.Duration{2 * time.Second},
		},
		{
			name:         "503 with Retry-After date",
			steps:        []string{"503-date", "execute"},
			wantStatuses: []int{503, 201}, wantCalls: 2, wantStatus: 201,
			wantDelays: []time.Duration{3 * time.Second},
		},
		{
			name:         "429 then 503",
			steps:        []string{"429", "503-seconds", "execute"},
			wantStatuses: []int{429, 503, 201}, wantCalls: 3, wantStatus: 201,
		},
		{
			// 502 and 504 are ordinary answers to the proxy: recorded and
			// replayed unless listed in release_statuses. Listing them says
			// "this upstream answers 502/504 only when it did nothing", so the
			// key is released and the retry executes.
			name:         "flaky 502 and 504 released",
			release:      []int{502, 504},
			steps:        []string{"502", "504", "execute"},
			wantStatuses: []int{502, 504, 201}, wantCalls: 3, wantStatus: 201,
		},
		{
			// Without release_statuses the upstream's 502 is the recorded
			// outcome: the retry gets it replayed and the client stops there.
			name:         "recorded 502 is final",
			steps:        []string{"502", "execute"},
			wantStatuses: []int{502, 502}, wantCalls: 1, wantStatus: 502, wantReplayed: true,
		},
		{
			name:         "response lost on the way back",
			steps:        []string{"execute"},
			lose:         1,
			wantStatuses: []int{0, 201}, wantCalls: 1, wantStatus: 201, wantReplayed: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := &upstream{}
			steps := map[string]http.HandlerFunc{
				"execute":     u.execute,
				"hangup":      hangUp,
				"429":         status(http.StatusTooManyRequests),
				"502":         status(http.StatusBadGateway),
				"504":         status(http.StatusGatewayTimeout),
				"503-seconds": status(http.StatusServiceUnavailable, "Retry-After", "2"),
				"503-date":    status(http.StatusServiceUnavailable, "Retry-After", now.Add(3*time.Second).Format(http.TimeFormat)),
			}
			for _, s := range tt.steps {
				u.steps = append(u.steps, steps[s])
			}
			base := startProxy(t, startUpstream(t, u), func(p *proxy.Policy) {
				p.ReleaseStatuses = append(p.ReleaseStatuses, tt.release...)
			})
			c, rt, sr := newTestClient(tt.lose)
			c.now = func() time.Time { return now }

			resp, err := c.Do(t.Context(), newCharge(t, base, "amount=100"))
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			body := readAll(t, resp)

			if got := rt.gotStatuses(); !slices.Equal(got, tt.wantStatuses) {
				t.Errorf("attempt statuses = %v, want %v", got, tt.wantStatuses)
			}
			if got := u.calls.Load(); got != tt.wantCalls {
				t.Errorf("upstream calls = %d, want %d", got, tt.wantCalls)
			}
			if got := resp.StatusCode; got != tt.wantStatus {
				t.Errorf("status = %d, want %d", got, tt.wantStatus)
			}
			if got := Replayed(resp); got != tt.wantReplayed {
				t.Errorf("Replayed = %v, want %v", got, tt.wantReplayed)
			}
			if tt.wantStatus == http.StatusCreated {
				if got, want := u.executions.Load(), int32(1); got != want {
					t.Errorf("executions = %d, want %d", got, want)
				}
				if want := "execution 1 of amount=100"; body != want {
					t.Errorf("body = %q, want %q", body, want)
				}
			}
			if tt.wantDelays != nil {
				if got := sr.gotDelays(); !slices.Equal(got, tt.wantDelays) {
					t.Errorf("delays = %v, want %v", got, tt.wantDelays)
				}
			}
			keys := rt.gotKeys()
			if keys[0] == "" || slices.ContainsFunc(keys, func(k string) bool { return k != keys[0] }) {
				t.Errorf("attempt keys = %q, want one non-empty key on every attempt", keys)
			}
			rt.assertRetriedBodiesClosed(t)
		})
	}
}

// The first attempt times out while the upstream is still working; the
// proxy keeps the upstream call going, answers the retries 409 until it
// completes, then replays it.
func TestDoAgainstProxyWaitsOutInFlight(t *testing.T) {
	u := &upstream{}
	release := make(chan struct{})
	u.steps = []http.HandlerFunc{func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-time.After(10 * time.Second): // bound: never hang the test
		}
		u.execute(w, r)
	}}
	base := startProxy(t, startUpstream(t, u), nil)
	c, rt, sr := newTestClient(0)
	c.MaxAttempts = 200
	c.AttemptTimeout = 200 * time.Millisecond
	c.MaxDelay = 5 * time.Millisecond
	var once sync.Once
	sr.hook = func(ctx context.Context, d time.Duration) error {
		// Let the upstream finish once a retry has been told "in flight";
		// until the record is written, further retries get 409 again.
		if slices.Contains(rt.gotStatuses(), http.StatusConflict) {
			once.Do(func() { close(release) })
		}
		return (&Client{}).wait(ctx, d)
	}
	t.Cleanup(func() { once.Do(func() { close(release) }) })

	resp, err := c.Do(t.Context(), newCharge(t, base, "amount=7"))
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	body := readAll(t, resp)

	statuses := rt.gotStatuses()
	if got, want := statuses[0], 0; got != want {
		t.Errorf("first attempt status = %d, want %d (timeout)", got, want)
	}
	if !slices.Contains(statuses, http.StatusConflict) {
		t.Errorf("attempt statuses = %v, want a 409 among them", statuses)
	}
	if got, want := u.calls.Load(), int32(1); got != want {
		t.Errorf("upstream calls = %d, want %d", got, want)
	}
	if !Replayed(resp) {
		t.Errorf("Replayed = false, want true")
	}
	if want := "execution 1 of amount=7"; body != want {
		t.Errorf("body = %q, want %q", body, want)
	}
	rt.assertRetriedBodiesClosed(t)
}

func TestDoAgainstProxyMismatchIsNotRetried(t *testing.T) {
	u := &upstream{}
	u.steps = []http.HandlerFunc{u.execute}
	base := startProxy(t, startUpstream(t, u), nil)
	c, rt, _ := newTestClient(0)
	ctx := WithKey(t.Context(), KeyFor("https://shop.example/orders", "order-42"))

	resp, err := c.Do(ctx, newCharge(t, base, "amount=100"))
	if err != nil {
		t.Fatalf("first Do: %v", err)
	}
	readAll(t, resp)

	resp, err = c.Do(ctx, newCharge(t, base, "amount=999"))
	if err == nil {
		readAll(t, resp)
		t.Fatalf("second Do with another payload: err = nil, want a mismatch")
	}
	var me *MismatchError
	if !errors.As(err, &me) {
		t.Fatalf("err = %T %v, want *MismatchError", err, err)
	}
	if !errors.Is(err, ErrKeyReused) {
		t.Errorf("errors.Is(err, ErrKeyReused) = false, want true")
	}
	if got, want := me.Problem.Type, ProblemPayloadMismatch; got != want {
		t.Errorf("problem type = %q, want %q", got, want)
	}
	if got, want := rt.gotStatuses(), []int{201, 422}; !slices.Equal(got, want) {
		t.Errorf("attempt statuses = %v, want %v", got, want)
	}
	if got, want := u.calls.Load(), int32(1); got != want {
		t.Errorf("upstream calls = %d, want %d", got, want)
	}
}

// A response too large to record executes once; the retry learns it
// happened from the replay headers, without a body.
func TestDoAgainstProxyReportsOmittedBody(t *testing.T) {
	u := &upstream{}
	big := strings.Repeat("x", 100)
	u.steps = []http.HandlerFunc{func(w http.ResponseWriter, r *http.Request) {
		u.executions.Add(1)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, big)
	}}
	base := startProxy(t, startUpstream(t, u), func(p *proxy.Policy) { p.MaxResponseBody = 10 })
	c, rt, _ := newTestClient(1) // the first, full answer is lost
	resp, err := c.Do(t.Context(), newCharge(t, base, "amount=1"))
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	body := readAll(t, resp)
	if got, want := rt.gotStatuses(), []int{0, http.StatusCreated}; !slices.Equal(got, want) {
		t.Errorf("attempt statuses = %v, want %v", got, want)
	}
	if !Replayed(resp) || !BodyOmitted(resp) {
		t.Errorf("Replayed, BodyOmitted = %v, %v; want true, true", Replayed(resp), BodyOmitted(resp))
	}
	if body != "" {
		t.Errorf("body = %q, want empty", body)
	}
	if got, want := u.executions.Load(), int32(1); got != want {
		t.Errorf("executions = %d, want %d", got, want)
	}
}

// A 409 in-flight says since when the first request has been running: the
// client decodes started_at from the real proxy's problem, and the detail
// names the same instant.
func TestInFlightProblemCarriesStartedAt(t *testing.T) {
	u := &upstream{}
	started, release := make(chan struct{}), make(chan struct{})
	u.steps = []http.HandlerFunc{func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-release:
		case <-time.After(10 * time.Second): // bound: never hang the test
		}
		u.execute(w, r)
	}}
	base := startProxy(t, startUpstream(t, u), nil)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })

	before := time.Now().Truncate(time.Millisecond)
	first := newCharge(t, base, "amount=7")
	first.Header.Set("Idempotency-Key", "in-flight-started-at")
	firstDone := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(first)
		if err == nil {
			resp.Body.Close()
		}
		firstDone <- err
	}()
	<-started

	c, _, _ := newTestClient(0)
	c.MaxAttempts = 2
	var problems []*Problem
	c.OnRetry = func(r Retry) { problems = append(problems, r.Problem) }
	retry := newCharge(t, base, "amount=7")
	retry.Header.Set("Idempotency-Key", "in-flight-started-at")
	_, err := c.Do(t.Context(), retry)
	after := time.Now()
	once.Do(func() { close(release) })
	if err := <-firstDone; err != nil {
		t.Fatalf("first request: %v", err)
	}

	var re *RetryError
	if !errors.As(err, &re) {
		t.Fatalf("Do = %v, want a *RetryError after two 409s", err)
	}
	if len(problems) != 1 || problems[0] == nil || problems[0].Type != ProblemInFlight {
		t.Fatalf("retried after %+v, want one in-flight problem", problems)
	}
	p := problems[0]
	if p.StartedAt.Before(before) || p.StartedAt.After(after) {
		t.Errorf("StartedAt = %v, want between %v and %v", p.StartedAt, before, after)
	}
	if re.Problem == nil || !re.Problem.StartedAt.Equal(p.StartedAt) {
		t.Errorf("RetryError.Problem = %+v, want the last 409's StartedAt", re.Problem)
	}
	if stamp := p.StartedAt.UTC().Format("2006-01-02T15:04:05.000Z"); !strings.Contains(p.Detail, stamp) {
		t.Errorf("detail %q does not name StartedAt %s", p.Detail, stamp)
	}
}

// A problem without started_at (any but in-flight, or a lease an earlier
// proxy version took) decodes with a zero StartedAt.
func TestProblemWithoutStartedAtIsZero(t *testing.T) {
	resp := &http.Response{
		Header: http.Header{"Content-Type": {"application/problem+json"}},
		Body:   io.NopCloser(strings.NewReader(`{"type":"` + ProblemInFlight + `","status":409}`)),
	}
	p := readProblem(resp)
	if p == nil || p.Type != ProblemInFlight || !p.StartedAt.IsZero() {
		t.Errorf("readProblem = %+v, want an in-flight problem with a zero StartedAt", p)
	}
}

// A problem whose started_at is not an RFC 3339 time, such as an
// upstream's own extension member, is still read, with a zero StartedAt.
func TestProblemWithForeignStartedAtIsStillRead(t *testing.T) {
	for _, startedAt := range []string{`1733040000`, `"2026-12-01 09:00"`, `{"at": 1}`, `null`} {
		resp := &http.Response{
			Header: http.Header{"Content-Type": {"application/problem+json"}},
			Body:   io.NopCloser(strings.NewReader(`{"type":"https://upstream.example/problems/busy","status":409,"detail":"busy","started_at":` + startedAt + `}`)),
		}
		p := readProblem(resp)
		if p == nil || p.Type != "https://upstream.example/problems/busy" || p.Status != 409 || p.Detail != "busy" || !p.StartedAt.IsZero() {
			t.Errorf("started_at %s: readProblem = %+v, want the upstream's problem with a zero StartedAt", startedAt, p)
		}
	}
}
