package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// flakyStore is a store that can be switched off: every operation then fails
// as an unreachable store does.
type flakyStore struct {
	Store
	down atomic.Bool
	// lostAfterBegin makes Extend and Complete report a lost lease.
	lostAfterBegin atomic.Bool
	// completeFailures and releaseFailures are how many Complete and
	// Release calls fail as unavailable.
	completeFailures atomic.Int64
	releaseFailures  atomic.Int64
}

func (f *flakyStore) Release(ctx context.Context, key, token string) error {
	if f.releaseFailures.Add(-1) >= 0 {
		return store.ErrUnavailable
	}
	return f.Store.Release(ctx, key, token)
}

func (f *flakyStore) Begin(ctx context.Context, key string, l store.Lease, ttl time.Duration) (store.BeginResult, error) {
	if f.down.Load() {
		return store.BeginResult{}, store.ErrUnavailable
	}
	return f.Store.Begin(ctx, key, l, ttl)
}

func (f *flakyStore) Extend(ctx context.Context, key, token string, lease time.Duration) error {
	if f.lostAfterBegin.Load() {
		return store.ErrLockLost
	}
	return f.Store.Extend(ctx, key, token, lease)
}

func (f *flakyStore) Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	if f.lostAfterBegin.Load() {
		return store.ErrLockLost
	}
	if f.completeFailures.Add(-1) >= 0 {
		return store.ErrUnavailable
	}
	return f.Store.Complete(ctx, key, token, rec, ttl)
}

func newFlaky(t *testing.T) *flakyStore {
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	return &flakyStore{Store: st}
}

func TestStoreUnavailable(t *testing.T) {
	t.Run("fail closed", func(t *testing.T) {
		st := newFlaky(t)
		e := newEnv(t, nil, withStore(st))
		st.down.Store(true)
		r := e.do(t, "POST", "/x", "k", "{}")
		if r.StatusCode != http.StatusServiceUnavailable || r.problemType() != "store-unavailable" || r.Header.Get("Retry-After") == "" {
			t.Fatalf("got %d %s, want 503 store-unavailable with Retry-After", r.StatusCode, r.body)
		}
		if e.up.calls.Load() != 0 {
			t.Fatal("upstream called while the store was down under fail_closed")
		}
		st.down.Store(false)
		e.do(t, "POST", "/x", "k", "{}")
		if r := e.do(t, "POST", "/x", "k", "{}"); !r.replayed() || e.up.calls.Load() != 1 {
			t.Fatalf("after recovery: replayed=%v executions=%d, want protection back", r.replayed(), e.up.calls.Load())
		}
		if got := e.outcomes(defaultRoute, OutcomeStoreRejected); got != 1 {
			t.Errorf("store_unavailable_rejected = %v, want 1", got)
		}
		if got := testutil.ToFloat64(e.handler.metrics.storeErrors.WithLabelValues(opBegin.String())); got != 1 {
			t.Errorf("store errors (begin) = %v, want 1", got)
		}
	})
	t.Run("fail open", func(t *testing.T) {
		st := newFlaky(t)
		e := newEnv(t, nil, withStore(st), withPolicy(func(p *Policy) { p.OnStoreError = true }))
		st.down.Store(true)
		a := e.do(t, "POST", "/x", "k", `{"v":1}`)
		b := e.do(t, "POST", "/x", "k", `{"v":1}`)
		if a.StatusCode != http.StatusCreated || b.replayed() || e.up.calls.Load() != 2 {
			t.Fatalf("fail_open: statuses %d/%d, executions %d; want both forwarded unprotected", a.StatusCode, b.StatusCode, e.up.calls.Load())
		}
		if !strings.Contains(e.up.last().Header.Get("Content-Type"), "json") || !strings.Contains(a.body, `{\"v\":1}`) {
			t.Fatalf("bypassed request lost its body or headers: %s", a.body)
		}
		if got := e.outcomes(defaultRoute, OutcomeStoreBypassed); got != 2 {
			t.Errorf("store_unavailable_bypassed = %v, want 2", got)
		}
	})
}

func TestUpstreamDialErrorReleasesKey(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	e := newEnv(t, nil, func(o *Options) { o.Upstream.Host = addr })
	for i := 0; i < 2; i++ {
		r := e.do(t, "POST", "/x", "k", "{}")
		if r.StatusCode != http.StatusBadGateway || r.problemType() != "upstream-unreachable" {
			t.Fatalf("attempt %d: got %d %s, want 502 upstream-unreachable (key released, not recorded)", i, r.StatusCode, r.body)
		}
	}
	if got := e.outcomes(defaultRoute, OutcomeUpstreamError); got != 2 {
		t.Errorf("upstream_error = %v, want 2", got)
	}
}

// hangUpAfterRead reads the whole request, then closes the connection
// without answering: the upstream may have acted on it.
func hangUpAfterRead(calls *atomic.Int64, failures int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		if calls.Add(1) <= failures {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.Write([]byte("ok"))
	}
}

func TestUpstreamFailsAfterRequestSent(t *testing.T) {
	t.Run("release", func(t *testing.T) {
		var calls atomic.Int64
		e := newEnv(t, hangUpAfterRead(&calls, 1))
		r := e.do(t, "POST", "/x", "k", "{}")
		if r.StatusCode != http.StatusBadGateway || r.problemType() != "upstream-failed" {
			t.Fatalf("got %d %s, want 502 upstream-failed", r.StatusCode, r.body)
		}
		if r := e.do(t, "POST", "/x", "k", "{}"); r.StatusCode != http.StatusOK || r.replayed() {
			t.Fatalf("retry: %d replayed=%v, want a second execution (at-least-once)", r.StatusCode, r.replayed())
		}
		if got := calls.Load(); got != 2 {
			t.Fatalf("executions = %d, want 2", got)
		}
	})
	t.Run("keep", func(t *testing.T) {
		var calls atomic.Int64
		e := newEnv(t, hangUpAfterRead(&calls, 1), withPolicy(func(p *Policy) { p.OnUpstreamError = UpstreamErrorKeep }))
		first := e.do(t, "POST", "/x", "k", "{}")
		r := e.do(t, "POST", "/x", "k", "{}")
		if r.StatusCode != http.StatusBadGateway || !r.replayed() || r.body != first.body {
			t.Fatalf("retry: %d replayed=%v, want the recorded 502 (at-most-once)", r.StatusCode, r.replayed())
		}
		if got := calls.Load(); got != 1 {
			t.Fatalf("executions = %d, want 1", got)
		}
	})
}

func TestUpstreamTimeoutIsAmbiguous(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) { <-release },
		func(o *Options) {
			// max_execution no longer than the timeout: nothing goes on detached.
			o.UpstreamTimeout, o.MaxExecution = 50*time.Millisecond, 50*time.Millisecond
			o.Default.OnUpstreamError = UpstreamErrorKeep
		})
	r := e.do(t, "POST", "/x", "k", "{}")
	if r.StatusCode != http.StatusBadGateway || r.problemType() != "upstream-failed" {
		t.Fatalf("got %d %s, want 502 upstream-failed", r.StatusCode, r.body)
	}
	if r := e.do(t, "POST", "/x", "k", "{}"); !r.replayed() || r.StatusCode != http.StatusBadGateway {
		t.Fatalf("retry under keep: %d replayed=%v, want the recorded 502", r.StatusCode, r.replayed())
	}
}

func TestReleaseStatuses(t *testing.T) {
	var calls atomic.Int64
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte("slow down"))
			return
		}
		w.Write([]byte("done"))
	})
	r := e.do(t, "POST", "/x", "k", "{}")
	if r.StatusCode != http.StatusTooManyRequests || r.body != "slow down" || r.Header.Get("Retry-After") != "1" {
		t.Fatalf("first: %d %q, want the upstream's 429 delivered", r.StatusCode, r.body)
	}
	if r := e.do(t, "POST", "/x", "k", "{}"); r.StatusCode != http.StatusOK || r.replayed() {
		t.Fatalf("retry: %d replayed=%v, want a fresh execution", r.StatusCode, r.replayed())
	}
	if got := e.outcomes(defaultRoute, OutcomeReleased); got != 1 {
		t.Errorf("released = %v, want 1", got)
	}
}

func TestServerErrorsAreRecorded(t *testing.T) {
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte("boom"))
	})
	e.do(t, "POST", "/x", "k", "{}")
	if r := e.do(t, "POST", "/x", "k", "{}"); r.StatusCode != 500 || !r.replayed() || e.up.calls.Load() != 1 {
		t.Fatalf("retry: %d replayed=%v executions=%d, want the 500 replayed", r.StatusCode, r.replayed(), e.up.calls.Load())
	}
}

func TestLargeResponseBodyIsDeliveredNotRecorded(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 4096) // 64 KiB
	for name, chunked := range map[string]bool{"content-length": false, "chunked": true} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Report", "yes")
				if chunked {
					w.Write([]byte(big[:100]))
					http.NewResponseController(w).Flush()
					w.Write([]byte(big[100:]))
					return
				}
				w.Header().Set("Content-Length", "65536")
				w.Write([]byte(big))
			}, withPolicy(func(p *Policy) { p.MaxResponseBody = 1024 }))
			first := e.do(t, "POST", "/x", "k", "{}")
			if first.body != big {
				t.Fatalf("first caller got %d bytes, want all %d", len(first.body), len(big))
			}
			r := e.do(t, "POST", "/x", "k", "{}")
			if !r.replayed() || r.Header.Get("Idempotent-Body-Omitted") != "true" || r.body != "" ||
				r.Header.Get("X-Report") != "yes" || r.Header.Get("Content-Length") != "0" || r.StatusCode != 200 {
				t.Fatalf("duplicate: %d replayed=%v omitted=%q len=%d CL=%q; want status and headers, empty body",
					r.StatusCode, r.replayed(), r.Header.Get("Idempotent-Body-Omitted"), len(r.body), r.Header.Get("Content-Length"))
			}
			if e.up.calls.Load() != 1 {
				t.Fatalf("executions = %d, want 1", e.up.calls.Load())
			}
		})
	}
}

func TestRecordedHeaders(t *testing.T) {
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Connection", "X-Hop")
		h.Set("X-Hop", "hop-by-hop, named in Connection")
		h.Set("Keep-Alive", "timeout=5")
		h.Set("Set-Cookie", "session=secret")
		h.Add("X-Multi", "a")
		h.Add("X-Multi", "b")
		w.Write([]byte("ok"))
	})
	e.do(t, "POST", "/x", "k", "{}")
	r := e.do(t, "POST", "/x", "k", "{}")
	if !r.replayed() {
		t.Fatal("not replayed")
	}
	for _, name := range []string{"X-Hop", "Keep-Alive", "Set-Cookie"} {
		if v := r.Header.Get(name); v != "" {
			t.Errorf("replay carries %s: %q", name, v)
		}
	}
	if got := r.Header.Values("X-Multi"); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("X-Multi = %q, want [a b] in order", got)
	}
}

func TestClientDisconnectDoesNotCancelUpstream(t *testing.T) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	e := newEnv(t, blockingUpstream(arrived, release))
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		_, err := e.srv.Client().Do(e.request(t, ctx, "/x", "k"))
		gone <- err
	}()
	<-arrived
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("client error = %v, want context.Canceled", err)
	}
	close(release) // the upstream finishes after its client left
	r := e.retryUntilSettled(t, "k")
	if !r.replayed() || r.body != "done" || e.up.calls.Load() != 1 {
		t.Fatalf("retry: %d %q replayed=%v executions=%d, want the replay of the one execution", r.StatusCode, r.body, r.replayed(), e.up.calls.Load())
	}
}

// The first byte reaches the first caller while the upstream is still
// writing: recording never delays it.
func TestResponseIsStreamed(t *testing.T) {
	release := make(chan struct{})
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("first chunk\n"))
		http.NewResponseController(w).Flush()
		<-release
		w.Write([]byte("second chunk\n"))
	})
	res, err := e.srv.Client().Do(e.request(t, context.Background(), "/x", "k"))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	line, err := bufio.NewReader(res.Body).ReadString('\n')
	if err != nil || line != "first chunk\n" {
		t.Fatalf("first line = %q, %v", line, err)
	}
	close(release)
	io.Copy(io.Discard, res.Body)
	r := e.retryUntilSettled(t, "k")
	if r.body != "first chunk\nsecond chunk\n" {
		t.Fatalf("replayed body = %q", r.body)
	}
}

func TestResponseCutShortIsNotRecorded(t *testing.T) {
	var calls atomic.Int64
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Content-Length", "100")
			w.Write([]byte("partial"))
			http.NewResponseController(w).Flush()
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.Close()
			return
		}
		w.Write([]byte("complete"))
	})
	if res, err := e.srv.Client().Do(e.request(t, context.Background(), "/x", "k")); err == nil {
		_, err = io.ReadAll(res.Body)
		res.Body.Close()
		if err == nil {
			t.Fatal("the first client read a clean end of a cut-short response")
		}
	}
	r := e.retryUntilSettled(t, "k")
	if r.body != "complete" || r.replayed() {
		t.Fatalf("retry: %q replayed=%v, want a fresh execution (release)", r.body, r.replayed())
	}
}
