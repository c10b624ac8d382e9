package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// A reconciling route's key is marked before its request is forwarded,
// so that a proxy killed while the upstream runs it leaves a key its next
// owner asks about: the upstream, running the request, finds the marker
// in the store. Once the outcome is known — an answer recorded, or a
// release status — the marker is gone.
func TestReconcilingRouteMarksItsKeyBeforeTheUpstreamRunsIt(t *testing.T) {
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	var markers map[string]string // key → its marker's storage key
	seen := make(chan bool, 2)
	handler := func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		ent, err := st.Inspect(r.Context(), markers[key])
		seen <- err == nil && ent.State == store.Completed && ent.Record != nil && len(ent.Record.Header[markerPending]) == 1
		if key == "released" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}
	e := newEnv(t, handler, withStore(st), func(o *Options) { reviewPolicy(&o.Default) })
	markers = map[string]string{}
	for _, k := range []string{"recorded", "released"} {
		markers[k] = e.keyHash(t, k) + ReconcileSuffix
	}
	for _, tc := range []struct {
		key    string
		status int
	}{{"recorded", http.StatusCreated}, {"released", http.StatusServiceUnavailable}} {
		t.Run(tc.key, func(t *testing.T) {
			if r := e.do(t, "POST", "/x", tc.key, `{}`); r.StatusCode != tc.status {
				t.Fatalf("%d %q, want %d", r.StatusCode, r.body, tc.status)
			}
			if !<-seen {
				t.Fatal("the upstream ran the request with no marker of its key in the store")
			}
			waitFor(t, func() bool {
				_, err := st.Inspect(context.Background(), markers[tc.key])
				return errors.Is(err, store.ErrNotFound)
			})
		})
	}
}

// A reconciling route's key whose marker the store does not take is not
// forwarded: unmarked, a proxy killed while the upstream runs it would
// leave its next owner to forward it again. The lease is given back and
// on_store_error answers (here fail_closed: 503); a retry once the store
// takes markers again executes the key, once.
func TestKeyThatCannotBeMarkedIsNotForwarded(t *testing.T) {
	st := &failingPending{Store: memory.New(memory.Options{})}
	t.Cleanup(func() { st.Close() })
	st.fail.Store(true)
	var posts atomic.Int64
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		w.WriteHeader(http.StatusCreated)
	}, withStore(st), func(o *Options) { reviewPolicy(&o.Default) })
	if r := e.do(t, "POST", "/x", "k", `{}`); r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("unmarked: %d %q, want 503", r.StatusCode, r.body)
	}
	if n := posts.Load(); n != 0 {
		t.Fatalf("upstream calls = %d, want 0: forwarded unmarked", n)
	}
	st.fail.Store(false)
	if r := e.do(t, "POST", "/x", "k", `{}`); r.StatusCode != http.StatusCreated {
		t.Fatalf("retry: %d %q, want 201: the lease was not given back", r.StatusCode, r.body)
	}
	if n := posts.Load(); n != 1 {
		t.Fatalf("upstream calls = %d, want 1", n)
	}
}

// failingPending is a store that times out the write of the marker
// written before a request is sent, while fail is set.
type failingPending struct {
	*memory.Store
	fail atomic.Bool
}

func (s *failingPending) Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	if s.fail.Load() && len(rec.Header[markerPending]) > 0 {
		return fmt.Errorf("the write timed out: %w", store.ErrUnavailable)
	}
	return s.Store.Complete(ctx, key, token, rec, ttl)
}

// A key taken over with a marker that says it is being settled, and that
// its resend went out, keeps that marker as it is: only the marker written
// before a request was sent is written anew. Rewritten, it would forget
// the resend, and the owner after this one would send it again.
func TestTakenOverMarkerKeepsItsResend(t *testing.T) {
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	var mk string
	kept := make(chan bool, 1)
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			ent, err := st.Inspect(r.Context(), mk)
			select {
			case kept <- err == nil && ent.Record != nil && len(ent.Record.Header[markerResentAt]) == 1:
			default:
			}
			w.Write([]byte(`{"id":"ch_1"}`))
			return
		}
		w.WriteHeader(http.StatusCreated)
	}
	e := newEnv(t, handler, withStore(st), func(o *Options) {
		reviewPolicy(&o.Default)
		o.Default.Reconcile.After = time.Millisecond
	})
	kh := e.keyHash(t, "k1")
	mk = kh + ReconcileSuffix
	if r := e.do(t, "POST", "/x", "k1", `{}`); r.StatusCode != http.StatusCreated {
		t.Fatalf("first: %d %q", r.StatusCode, r.body)
	}
	// The key as an earlier owner, killed after its resend, left it: its
	// lease expired, its marker saying the resend went out.
	ctx := context.Background()
	ent, err := st.Inspect(ctx, kh)
	if err != nil || ent.Record == nil {
		t.Fatalf("record: %+v, %v", ent, err)
	}
	if err := st.Delete(ctx, kh); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, err := st.Inspect(ctx, mk); return errors.Is(err, store.ErrNotFound) })
	res, err := st.Begin(ctx, mk, store.Lease{Fingerprint: ent.Record.Fingerprint}, time.Minute)
	if err != nil || res.State != store.Acquired {
		t.Fatalf("marker's lease: %+v, %v", res, err)
	}
	at := time.Now().Add(-time.Second).UTC()
	marker := &store.Record{Status: http.StatusAccepted, Fingerprint: ent.Record.Fingerprint, CreatedAt: at.Truncate(time.Millisecond),
		Header: map[string][]string{markerResentAt: {at.Format(time.RFC3339Nano)}}}
	if err := st.Complete(ctx, mk, res.Token, marker, time.Hour); err != nil {
		t.Fatal(err)
	}
	if r := e.do(t, "POST", "/x", "k1", `{}`); r.StatusCode != http.StatusOK || r.Header.Get(IdempotencyReconciled) != "true" {
		t.Fatalf("taken over: %d %q, want the found answer", r.StatusCode, r.body)
	}
	if !<-kept {
		t.Fatal("the marker the lookup went out with no longer says the resend went out")
	}
}
