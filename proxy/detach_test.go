package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution/executiontest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

const (
	testTimeout      = time.Second
	testMaxExecution = 10 * time.Second
)

// slowEnv is an env whose upstream blocks until released, with a fake
// clock that moves upstream.timeout and upstream.max_execution.
func slowEnv(t *testing.T, opts ...envOption) (e *env, clock *executiontest.FakeClock, arrived chan struct{}, release chan struct{}) {
	t.Helper()
	arrived, release = make(chan struct{}, 8), make(chan struct{})
	opts = append([]envOption{func(o *Options) {
		o.UpstreamTimeout, o.MaxExecution = testTimeout, testMaxExecution
	}}, opts...)
	e = newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("X-Charge", "ch_1")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("charged once"))
	}, opts...)
	clock = executiontest.NewFakeClock()
	e.handler.clock = clock
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	return e, clock, arrived, release
}

// goDo sends a request in the background; its response arrives on the channel.
func (e *env) goDo(t *testing.T, key string) <-chan *response {
	ch := make(chan *response, 1)
	go func() { ch <- e.do(t, "POST", "/x", key, "{}") }()
	return ch
}

func (e *env) detachedEnded(o Outcome) float64 {
	return testutil.ToFloat64(e.handler.metrics.detachedEnded.WithLabelValues(defaultRoute, string(o)))
}

func TestSlowUpstreamIsWaitedFor(t *testing.T) {
	e, clock, arrived, release := slowEnv(t)
	first := e.goDo(t, "k")
	<-arrived
	clock.Advance(testTimeout)
	r := <-first
	if r.StatusCode != http.StatusGatewayTimeout || r.problemType() != "upstream-timeout" || r.Header.Get("Retry-After") != "1" {
		t.Fatalf("client past upstream.timeout: %d %s Retry-After=%q, want 504 upstream-timeout with Retry-After: 1", r.StatusCode, r.body, r.Header.Get("Retry-After"))
	}
	if got := gaugeValue(e.handler.metrics.detached); got != 1 {
		t.Errorf("detached requests = %d while the call runs, want 1", got)
	}
	if r := e.do(t, "POST", "/x", "k", "{}"); r.StatusCode != http.StatusConflict || r.problemType() != "in-flight" {
		t.Fatalf("retry while the call runs: %d %s, want 409 in-flight", r.StatusCode, r.body)
	}
	close(release)
	if err := e.handler.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	r = e.do(t, "POST", "/x", "k", "{}")
	if !r.replayed() || r.StatusCode != http.StatusCreated || r.body != "charged once" || r.Header.Get("X-Charge") != "ch_1" {
		t.Fatalf("retry after the call: %d %q replayed=%v, want the upstream's own answer replayed", r.StatusCode, r.body, r.replayed())
	}
	if n := e.up.calls.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
	if got := gaugeValue(e.handler.metrics.detached); got != 0 {
		t.Errorf("detached requests = %d after the call, want 0", got)
	}
	if got := e.detachedEnded(OutcomeExecuted); got != 1 {
		t.Errorf("detached calls ended executed = %v, want 1", got)
	}
	if got := e.outcomes(defaultRoute, OutcomeUpstreamTimeout); got != 1 {
		t.Errorf("requests counted upstream_timeout = %v, want 1", got)
	}
}

// When the lease's first renewal comes before upstream.timeout, it is the
// renewal that arms the deadline: the client is still answered 504 when
// upstream.timeout passes, and not before.
func TestTimeoutPassesAfterFirstRenewal(t *testing.T) {
	e, clock, arrived, _ := slowEnv(t, withPolicy(func(p *Policy) { p.LockTTL = testTimeout }))
	first := e.goDo(t, "k")
	<-arrived
	clock.Advance(testTimeout - time.Millisecond) // past the renewals at a third and two thirds
	select {
	case r := <-first:
		t.Fatalf("client before upstream.timeout: %d %s, want no answer yet", r.StatusCode, r.body)
	default:
	}
	clock.Advance(time.Millisecond)
	select {
	case r := <-first:
		if r.StatusCode != http.StatusGatewayTimeout || r.problemType() != "upstream-timeout" {
			t.Fatalf("client past upstream.timeout: %d %s, want 504 upstream-timeout", r.StatusCode, r.body)
		}
	case <-time.After(10 * time.Second): // the answer is due at once: a bound, not a pause
		t.Fatal("client past upstream.timeout: no answer, want 504 upstream-timeout")
	}
}

// When max_execution passes, the call is cancelled and on_upstream_error
// applies: keep records a 502 that retries get, release frees the key.
func TestMaxExecutionAppliesOnUpstreamError(t *testing.T) {
	for _, keep := range []bool{true, false} {
		name := map[bool]string{true: "keep", false: "release"}[keep]
		t.Run(name, func(t *testing.T) {
			e, clock, arrived, _ := slowEnv(t, withPolicy(func(p *Policy) { p.OnUpstreamError = map[bool]OnUpstreamError{true: UpstreamErrorKeep}[keep] }))
			first := e.goDo(t, "k")
			<-arrived
			clock.Advance(testTimeout)
			if r := <-first; r.StatusCode != http.StatusGatewayTimeout {
				t.Fatalf("first: %d, want 504", r.StatusCode)
			}
			clock.Advance(testMaxExecution - testTimeout)
			if err := e.handler.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := e.detachedEnded(OutcomeUpstreamError); got != 1 {
				t.Errorf("detached calls ended upstream_error = %v, want 1", got)
			}
			retry := e.goDo(t, "k")
			if keep {
				r := <-retry
				if !r.replayed() || r.StatusCode != http.StatusBadGateway || !strings.Contains(r.body, "max_execution") {
					t.Fatalf("retry under keep: %d replayed=%v %s, want the recorded 502 naming max_execution", r.StatusCode, r.replayed(), r.body)
				}
				return
			}
			<-arrived // released: the retry executes again
			if n := e.up.calls.Load(); n != 2 {
				t.Fatalf("executions = %d, want 2 under release", n)
			}
			clock.Advance(testTimeout)
			<-retry
		})
	}
}

// With max_execution equal to upstream.timeout, nothing goes on detached:
// the call is cancelled when the client's timeout passes, and the client
// is told so.
func TestMaxExecutionEqualToTimeoutCancelsAtTimeout(t *testing.T) {
	e, clock, arrived, _ := slowEnv(t, func(o *Options) { o.MaxExecution = testTimeout })
	first := e.goDo(t, "k")
	<-arrived
	clock.Advance(testTimeout)
	r := <-first
	if r.StatusCode != http.StatusBadGateway || r.problemType() != "upstream-failed" {
		t.Fatalf("got %d %s, want 502 upstream-failed", r.StatusCode, r.body)
	}
	if !strings.Contains(r.body, "within the upstream timeout") {
		t.Errorf("detail of %s: want the upstream timeout named as what passed", r.body)
	}
	if got := testutil.ToFloat64(e.handler.metrics.detached); got != 0 {
		t.Errorf("detached requests = %v, want 0", got)
	}
}

// Past upstream.max_detached, a call whose timeout passes is cancelled
// instead of going on detached, and that is counted.
func TestDetachedCallsAreBounded(t *testing.T) {
	e, clock, arrived, release := slowEnv(t, func(o *Options) { o.MaxDetached = 1 })
	first := e.goDo(t, "a")
	second := e.goDo(t, "b")
	<-arrived
	<-arrived
	clock.Advance(testTimeout)
	got := map[int]int{}
	for _, ch := range []<-chan *response{first, second} {
		got[(<-ch).StatusCode]++
	}
	if got[http.StatusGatewayTimeout] != 1 || got[http.StatusBadGateway] != 1 {
		t.Fatalf("statuses %v, want one 504 (detached) and one 502 (cancelled at upstream.timeout)", got)
	}
	if n := testutil.ToFloat64(e.handler.metrics.detachRefused); n != 1 {
		t.Errorf("detach refused = %v, want 1", n)
	}
	close(release)
	if err := e.handler.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestDetachedCallsBoundedInBytes(t *testing.T) {
	e, clock, arrived, _ := slowEnv(t, func(o *Options) { o.MaxDetachedBytes = o.Default.MaxResponseBody })
	first := e.goDo(t, "a") // its "{}" body does not fit beside max_response_body
	<-arrived
	clock.Advance(testTimeout)
	if r := <-first; r.StatusCode != http.StatusBadGateway {
		t.Fatalf("got %d, want 502: no room to detach", r.StatusCode)
	}
}

// A response whose status went out before upstream.timeout is cut for the
// client when it passes; the call goes on and its whole answer is
// recorded.
func TestTimeoutDuringBodyRecordsWholeAnswer(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("part one,"))
		http.NewResponseController(w).Flush()
		close(started)
		<-release
		w.Write([]byte(" part two"))
	}, func(o *Options) { o.UpstreamTimeout, o.MaxExecution = testTimeout, testMaxExecution })
	clock := executiontest.NewFakeClock()
	e.handler.clock = clock
	res, err := e.srv.Client().Do(e.request(t, context.Background(), "/x", "k"))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	clock.Advance(testTimeout)
	_, err = io.ReadAll(res.Body)
	res.Body.Close()
	if err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("reading a response cut at upstream.timeout: err = %v, want the connection cut", err)
	}
	close(release)
	if err := e.handler.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := e.do(t, "POST", "/x", "k", "{}")
	if !r.replayed() || r.body != "part one, part two" {
		t.Fatalf("retry: %d %q replayed=%v, want the whole answer replayed", r.StatusCode, r.body, r.replayed())
	}
}

// An answer whose body max_execution cuts short is, under keep, recorded
// as the call max_execution ended: its 502 says so, not only that the
// answer was cut.
func TestAnswerCutAtMaxExecutionIsRecordedAsMaxExecution(t *testing.T) {
	started := make(chan struct{})
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("part one,"))
		http.NewResponseController(w).Flush()
		close(started)
		<-r.Context().Done() // the rest never comes
	}, func(o *Options) {
		o.UpstreamTimeout, o.MaxExecution = testTimeout, testMaxExecution
		o.Default.OnUpstreamError = UpstreamErrorKeep
	})
	clock := executiontest.NewFakeClock()
	e.handler.clock = clock
	res, err := e.srv.Client().Do(e.request(t, context.Background(), "/x", "k"))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	clock.Advance(testTimeout) // the client's response is cut; the call goes on
	io.ReadAll(res.Body)
	res.Body.Close()
	clock.Advance(testMaxExecution - testTimeout)
	if err := e.handler.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := e.do(t, "POST", "/x", "k", "{}")
	if !r.replayed() || r.StatusCode != http.StatusBadGateway || !strings.Contains(r.body, "max_execution") {
		t.Fatalf("retry: %d replayed=%v %s, want the recorded 502 naming max_execution", r.StatusCode, r.replayed(), r.body)
	}
}

// An answer cut short ends its call as the reverse proxy ends it, with
// http.ErrAbortHandler: an expected end, not logged as a panic of the
// proxy's.
func TestAnswerCutShortIsNotLoggedAsAPanic(t *testing.T) {
	logs := answerBrokenOffByTheUpstream(t)
	if lines := logs.lines(t, "panicked"); len(lines) != 0 {
		t.Errorf("an answer cut short was logged as a panic: %v", lines)
	}
}

// A client that disconnects detaches its call the same way: counted while
// it runs, bounded by max_execution, its request reported when it ends.
func TestClientDisconnectDetaches(t *testing.T) {
	e, _, arrived, release := slowEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		_, err := e.srv.Client().Do(e.request(t, ctx, "/x", "k"))
		gone <- err
	}()
	<-arrived
	cancel()
	<-gone
	gaugeIs(t, "the detached gauge", e.handler.metrics.detached, 1)
	if got := e.outcomes(defaultRoute, OutcomeExecuted); got != 0 {
		t.Fatalf("executed = %v before the call ended, want 0", got)
	}
	close(release)
	if err := e.handler.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := e.outcomes(defaultRoute, OutcomeExecuted); got != 1 {
		t.Errorf("executed = %v once the call ended, want 1", got)
	}
	if got := e.detachedEnded(OutcomeExecuted); got != 1 {
		t.Errorf("detached calls ended executed = %v, want 1", got)
	}
}

// A shutdown out of time never releases a key whose request reached the
// upstream: the lease is left to expire, and the client's 502 says why.
func TestAbortKeepsLeaseOfRunningRequest(t *testing.T) {
	for _, keep := range []bool{true, false} {
		name := map[bool]string{true: "keep", false: "release"}[keep]
		t.Run(name, func(t *testing.T) {
			e, clock, arrived, _ := slowEnv(t, withPolicy(func(p *Policy) { p.OnUpstreamError = map[bool]OnUpstreamError{true: UpstreamErrorKeep}[keep] }))
			detached := e.goDo(t, "detached")
			<-arrived
			clock.Advance(testTimeout)
			if r := <-detached; r.StatusCode != http.StatusGatewayTimeout {
				t.Fatalf("first: %d, want 504", r.StatusCode)
			}
			attached := e.goDo(t, "attached")
			<-arrived
			e.handler.Abort()
			r := <-attached
			if r.StatusCode != http.StatusBadGateway || !strings.Contains(r.body, "The proxy was shutting down") {
				t.Fatalf("client of an aborted request: %d %s, want a 502 saying the proxy was shutting down", r.StatusCode, r.body)
			}
			if err := e.handler.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, key := range []string{"attached", "detached"} {
				res, err := e.store.Begin(context.Background(), e.keyHash(t, key), store.Lease{}, time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if res.State != store.InFlight {
					t.Errorf("%s: key is %s after the abort, want it still locked (in flight) until lock_ttl", key, res.State)
				}
			}
		})
	}
}

// A call its deadline cuts while the upstream's answer arrives is one
// event, logged once in the proxy's own voice — "upstream request
// failed" with its key_hash and the cut for error, as a cut before the
// answer is —, never as well by the reverse proxy's body copy; whether the
// call was detached (cut at max_execution) or not (cut at the client's
// wait). A body the upstream itself breaks off is still logged by it.
func TestCallCutWhileItsAnswerArrivesIsLoggedOnce(t *testing.T) {
	for name, maxExecution := range map[string]time.Duration{
		"detached, cut at max_execution": testMaxExecution,
		"attached, cut at its wait":      testTimeout,
	} {
		t.Run(name, func(t *testing.T) {
			var logs lockedBuffer
			started := make(chan struct{})
			e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
				w.Write([]byte("part one,"))
				http.NewResponseController(w).Flush()
				close(started)
				<-r.Context().Done() // the rest never comes
			}, func(o *Options) {
				o.UpstreamTimeout, o.MaxExecution = testTimeout, maxExecution
			}, withLog(&logs))
			clock := executiontest.NewFakeClock()
			e.handler.clock = clock
			res, err := e.srv.Client().Do(e.request(t, context.Background(), "/x", "k"))
			if err != nil {
				t.Fatal(err)
			}
			<-started
			clock.Advance(testTimeout)
			io.ReadAll(res.Body)
			res.Body.Close()
			clock.Advance(maxExecution - testTimeout)
			if err := e.handler.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			if lines := logs.lines(t, "body copy"); len(lines) != 0 {
				t.Errorf("the reverse proxy logged the cut too: %v", lines)
			}
			lines := logs.lines(t, "upstream request failed")
			if len(lines) != 1 || lines[0]["key_hash"] != e.keyHash(t, "k") || !strings.Contains(fmt.Sprint(lines[0]["error"]), "upstream call cut") {
				t.Fatalf("lines of the failure: %v, want one with the key_hash and the cut", lines)
			}
		})
	}
	t.Run("broken off by the upstream", func(t *testing.T) {
		logs := answerBrokenOffByTheUpstream(t)
		if lines := logs.lines(t, "body copy"); len(lines) != 1 {
			t.Errorf("lines of the broken body copy: %v, want 1", lines)
		}
		if lines := logs.lines(t, "upstream request failed"); len(lines) != 0 {
			t.Errorf("a body the upstream broke off was logged as a cut: %v", lines)
		}
	})
}

// answerBrokenOffByTheUpstream sends a keyed request whose upstream
// answers ten of the hundred bytes it announced and breaks off, as the
// reverse proxy ends such a call (http.ErrAbortHandler), and returns the
// proxy's log once the call ended.
func answerBrokenOffByTheUpstream(t *testing.T) *lockedBuffer {
	t.Helper()
	logs := new(lockedBuffer)
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.Write([]byte("ten bytes."))
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler) // the rest never comes
	}, withLog(logs))
	e.srv.Client().Do(e.request(t, context.Background(), "/x", "k"))
	if err := e.handler.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	return logs
}
