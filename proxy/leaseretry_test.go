package proxy

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution/executiontest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// extendBlips is a store whose next extendFailures renewals fail as
// unavailable, as during a short store outage; it counts the renewals that
// succeed.
type extendBlips struct {
	Store
	extendFailures atomic.Int64
	extended       atomic.Int64
}

func (s *extendBlips) Extend(ctx context.Context, key, token string, lease time.Duration) error {
	if s.extendFailures.Add(-1) >= 0 {
		return store.ErrUnavailable
	}
	err := s.Store.Extend(ctx, key, token, lease)
	if err == nil {
		s.extended.Add(1)
	}
	return err
}

// A renewal that fails because the store is unavailable (not because the
// lease was lost) is retried: when the store answers again the lease is
// renewed and keeps being renewed, so a slow upstream's duplicates are
// refused past lock_ttl instead of executing again.
func TestLeaseRenewalsResumeAfterAStoreError(t *testing.T) {
	const lockTTL = 30 * time.Second
	for _, failures := range []int64{1, 2} {
		t.Run(itoa(failures)+" failed renewals", func(t *testing.T) {
			clock := executiontest.NewFakeClock()
			mem := memory.New(memory.Options{Now: clock.Now})
			t.Cleanup(func() { mem.Close() })
			st := &extendBlips{Store: mem}
			st.extendFailures.Store(failures)
			arrived, release := make(chan struct{}, 1), make(chan struct{})
			e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("X-First") != "" {
					arrived <- struct{}{}
					<-release
				}
				w.Write([]byte("done"))
			}, withStore(st), withPolicy(func(p *Policy) { p.LockTTL = lockTTL }))
			e.handler.clock = clock
			first := make(chan *response)
			go func() { first <- e.do(t, "POST", "/x", "k", "{}", "X-First", "1") }()
			<-arrived
			duplicatesConflictForFourLockTTLs(t, e, clock, lockTTL, release)
			close(release)
			<-first // a 504 by now: upstream.timeout passed on the fake clock
			if err := e.handler.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			if r := e.do(t, "POST", "/x", "k", "{}"); !r.replayed() || r.body != "done" {
				t.Fatalf("retry after the call: %d replayed=%v %q, want the replay of its answer", r.StatusCode, r.replayed(), r.body)
			}
			if got := e.up.calls.Load(); got != 1 {
				t.Fatalf("executions = %d, want 1", got)
			}
			if st.extendFailures.Load() >= 0 || st.extended.Load() == 0 {
				t.Fatalf("renewals: %d failures left, %d succeeded; want every failure retried, then renewals", st.extendFailures.Load()+1, st.extended.Load())
			}
			if got := testutil.ToFloat64(e.handler.metrics.lockLost); got != 0 {
				t.Errorf("lock lost = %v, want 0", got)
			}
		})
	}
}
