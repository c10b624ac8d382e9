package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
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

// A key released by a request that lost it meanwhile, without a renewal
// finding it (here the store restarted while the upstream ran), keeps the
// marker its next owner wrote before sending its own call: deleted, a proxy
// killed while the upstream runs that call would leave the key unmarked,
// and the owner after it would execute the key again. The marker of a key
// about to be released goes only once a renewal proves the key still held.
func TestReleaseOfAKeyLostMeanwhileKeepsItsNextOwnersMarker(t *testing.T) {
	st := &releases{Store: memory.New(memory.Options{}), seen: make(chan string, 16)}
	t.Cleanup(func() { st.Close() })
	started, answer := make(chan struct{}, 1), make(chan struct{})
	var posts atomic.Int64
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.Write([]byte(`{"id":"ch_1"}`)) // the next owner's charge
			return
		}
		posts.Add(1)
		started <- struct{}{}
		<-answer
		w.WriteHeader(http.StatusServiceUnavailable) // not processed: released
	}
	e := newEnv(t, handler, withStore(st), func(o *Options) {
		reviewPolicy(&o.Default)
		o.Default.Reconcile.After = time.Millisecond
	})
	ctx := context.Background()
	kh := e.keyHash(t, "k1")
	mk := kh + ReconcileSuffix
	done := make(chan *response, 1)
	go func() { done <- e.do(t, "POST", "/x", "k1", `{}`) }()
	<-started
	lease, err := st.Inspect(ctx, kh)
	if err != nil {
		t.Fatal(err)
	}
	// The store restarts: the lease and the marker are gone. The key's
	// next owner takes it and marks it before sending its call.
	for _, k := range []string{kh, mk} {
		if err := st.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := st.Begin(ctx, kh, store.Lease{Fingerprint: lease.Fingerprint}, time.Minute); err != nil || res.State != store.Acquired {
		t.Fatalf("next owner's lease: %+v, %v", res, err)
	}
	res, err := st.Begin(ctx, mk, store.Lease{Fingerprint: lease.Fingerprint}, time.Minute)
	if err != nil || res.State != store.Acquired {
		t.Fatalf("next owner's marker: %+v, %v", res, err)
	}
	at := time.Now().Add(-time.Second).UTC().Truncate(time.Millisecond)
	marker := &store.Record{Status: http.StatusAccepted, Fingerprint: lease.Fingerprint, CreatedAt: at,
		Header: map[string][]string{markerPending: {"true"}}}
	if err := st.Complete(ctx, mk, res.Token, marker, time.Hour); err != nil {
		t.Fatal(err)
	}
	close(answer)
	if r := <-done; r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("first: %d %q, want the upstream's 503", r.StatusCode, r.body)
	}
	nextOwnersMarkerKept(t, e, st, kh, at, &posts)
}

// nextOwnersMarkerKept waits for the release of key hash kh on st, then
// checks that the marker the key's next owner wrote at at is still there,
// and that once that owner's lease is gone (killed mid-call) the key's
// next request is answered by a lookup: posts, the upstream's executions,
// stays 1.
func nextOwnersMarkerKept(t *testing.T, e *env, st *releases, kh string, at time.Time, posts *atomic.Int64) {
	t.Helper()
	ctx := context.Background()
	for k := range st.seen { // the release comes after the marker is dropped, or not
		if k == kh {
			break
		}
	}
	mk := kh + ReconcileSuffix
	if ent, err := st.Inspect(ctx, mk); err != nil || ent.Record == nil || !ent.Record.CreatedAt.Equal(at) {
		t.Fatalf("next owner's marker: %+v, %v: deleted by the proxy that lost the key", ent, err)
	}
	// The next owner is killed while its call runs: its lease runs out.
	// The key's next request asks the upstream, and never forwards it.
	if err := st.Delete(ctx, kh); err != nil {
		t.Fatal(err)
	}
	if r := e.do(t, "POST", "/x", "k1", `{}`); r.StatusCode != http.StatusOK || r.Header.Get(IdempotencyReconciled) != "true" {
		t.Fatalf("after the next owner was killed: %d %q, want the found answer", r.StatusCode, r.body)
	}
	if n := posts.Load(); n != 1 {
		t.Fatalf("upstream calls = %d, want 1: the key was forwarded unmarked", n)
	}
}

// releases is a store that reports the key of every Release on seen.
type releases struct {
	*memory.Store
	seen chan string
}

func (s *releases) Release(ctx context.Context, key, token string) error {
	err := s.Store.Release(ctx, key, token)
	select {
	case s.seen <- key:
	default: // not awaited
	}
	return err
}

// A reconciling route's key the store had room to lease but not to mark
// (a memory store at max_bytes, when_full: reject) is answered as a full
// store answers a new key: 503 store-full, never forwarded — under
// fail_open too, which forwards what the store cannot protect, not a key
// it holds but could not mark, that a proxy killed mid-call would leave to
// execute again. The lease is given back.
func TestKeyTheFullStoreCannotMarkIsRefusedAsStoreFull(t *testing.T) {
	// What the key's lease and its marker take, measured while the
	// upstream runs the request on a store without a bound: one byte less
	// holds the lease and the marker's lease, not the marker.
	var marked int64
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		marked = st.UsedBytes()
		w.WriteHeader(http.StatusCreated)
	}, withStore(st), func(o *Options) { reviewPolicy(&o.Default) })
	if r := e.do(t, "POST", "/x", "k", `{}`); r.StatusCode != http.StatusCreated {
		t.Fatalf("unbounded: %d %q", r.StatusCode, r.body)
	}
	for _, onStoreError := range []OnStoreError{FailClosed, FailOpen} {
		t.Run(onStoreError.String(), func(t *testing.T) {
			st := memory.New(memory.Options{MaxBytes: marked - 1, WhenFull: store.Reject})
			t.Cleanup(func() { st.Close() })
			var posts atomic.Int64
			e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
				posts.Add(1)
				w.WriteHeader(http.StatusCreated)
			}, withStore(st), func(o *Options) {
				reviewPolicy(&o.Default)
				o.Default.OnStoreError = onStoreError
			})
			r := e.do(t, "POST", "/x", "k", `{}`)
			if r.StatusCode != http.StatusServiceUnavailable || !strings.Contains(r.body, probStoreFull.Type) {
				t.Fatalf("unmarked: %d %q, want 503 store-full", r.StatusCode, r.body)
			}
			if n := posts.Load(); n != 0 {
				t.Fatalf("upstream calls = %d, want 0: forwarded unmarked", n)
			}
			if _, err := st.Inspect(context.Background(), e.keyHash(t, "k")); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("the key after the refusal: %v, want it released", err)
			}
			if n := st.UsedBytes(); n != 0 {
				t.Fatalf("store holds %d bytes after the refusal, want 0: a lease was kept", n)
			}
		})
	}
}

// A settlement that releases its key (the lookup says absent, resend off)
// after losing the key without a renewal finding it (here the store
// restarted while the lookup ran) keeps the marker of the key's next
// owner, written before its own call: deleted, a proxy killed while that
// call runs would leave the key to execute again.
func TestSettlementReleasingAKeyLostMeanwhileKeepsItsNextOwnersMarker(t *testing.T) {
	st := &releases{Store: memory.New(memory.Options{}), seen: make(chan string, 16)}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	var kh, mk string
	var posts, lookups atomic.Int64
	at := time.Now().Add(-time.Second).UTC().Truncate(time.Millisecond)
	nextOwner := func() error {
		lease, err := st.Inspect(ctx, kh)
		if err != nil {
			return err
		}
		// The store restarts: the lease and the marker are gone. The
		// key's next owner takes it and marks it before sending its call.
		for _, k := range []string{kh, mk} {
			if err := st.Delete(ctx, k); err != nil {
				return err
			}
		}
		if res, err := st.Begin(ctx, kh, store.Lease{Fingerprint: lease.Fingerprint}, time.Minute); err != nil || res.State != store.Acquired {
			return fmt.Errorf("next owner's lease: %+v, %v", res, err)
		}
		res, err := st.Begin(ctx, mk, store.Lease{Fingerprint: lease.Fingerprint}, time.Minute)
		if err != nil || res.State != store.Acquired {
			return fmt.Errorf("next owner's marker: %+v, %v", res, err)
		}
		return st.Complete(ctx, mk, res.Token, &store.Record{Status: http.StatusAccepted, Fingerprint: lease.Fingerprint,
			CreatedAt: at, Header: map[string][]string{markerPending: {"true"}}}, time.Hour)
	}
	restarted := make(chan error, 1)
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			if lookups.Add(1) == 1 {
				restarted <- nextOwner()
				w.WriteHeader(http.StatusNotFound) // absent
				return
			}
			w.Write([]byte(`{"id":"ch_1"}`)) // the next owner's charge
			return
		}
		posts.Add(1)
		hangUp(w) // outcome unknown
	}
	e := newEnv(t, handler, withStore(st), func(o *Options) {
		reviewPolicy(&o.Default)
		o.Default.Reconcile.Resend = false
		o.Default.Reconcile.After = time.Millisecond
	})
	kh = e.keyHash(t, "k1")
	mk = kh + ReconcileSuffix
	e.do(t, "POST", "/x", "k1", `{}`)
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	nextOwnersMarkerKept(t, e, st, kh, at, &posts)
}
