package proxy

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// A key's marker is kept while its lookups may run (reconcile.for), a
// resend with them (upstream.max_execution), and as long as the 502 a
// settlement may keep (ttl): the three added, none taken from another.
func TestMarkerIsKeptForReconcileForMaxExecutionAndTTLTogether(t *testing.T) {
	l := &chargeLedger{charges: map[string]bool{}}
	var lookupsUp atomic.Bool
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			if !lookupsUp.Load() {
				w.WriteHeader(http.StatusServiceUnavailable) // neither found nor absent
				return
			}
		}
		l.serve(w, r)
	}, func(o *Options) {
		reviewPolicy(&o.Default)
		o.MaxExecution = time.Hour
		o.Default.Reconcile.After, o.Default.Reconcile.Every = time.Millisecond, 50*time.Millisecond
	}, withStore(st))
	pol := DefaultPolicy() // reviewPolicy keeps its reconcile.for and ttl
	ttl := pol.Reconcile.For + time.Hour + pol.TTL

	mk := e.keyHash(t, "k1") + ReconcileSuffix
	before := time.Now().Truncate(time.Second)
	done := make(chan *response, 1)
	go func() { done <- e.do(t, "POST", "/x", "k1", `{}`) }()
	var marker store.Entry
	waitFor(t, func() bool {
		var err error
		marker, err = st.Inspect(context.Background(), mk)
		return err == nil && marker.State == store.Completed
	})
	after := time.Now().Add(time.Second).Truncate(time.Second)
	lookupsUp.Store(true)
	if r := <-done; r.StatusCode != http.StatusOK {
		t.Fatalf("got %d %q, want the found charge", r.StatusCode, r.body)
	}
	if marker.ExpiresAt.Before(before.Add(ttl)) || marker.ExpiresAt.After(after.Add(ttl)) {
		t.Errorf("marker expires at %v, want %v after it was written (between %v and %v)",
			marker.ExpiresAt, ttl, before.Add(ttl), after.Add(ttl))
	}
}

// A marker says when the original request was sent again as the time it
// recorded; none recorded is "not resent", and one that cannot be read
// counts as resent just now, so that it is never resent again.
func TestMarkerResentAtIsTheTimeItRecords(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 30, 0, 123456789, time.UTC)
	marker := func(v ...string) *store.Record {
		return &store.Record{Header: map[string][]string{markerResentAt: v}}
	}
	if got := resentAt(marker(at.Format(time.RFC3339Nano))); !got.Equal(at) {
		t.Errorf("resent at %v, want the recorded %v", got, at)
	}
	if got := resentAt(&store.Record{Header: map[string][]string{}}); !got.IsZero() {
		t.Errorf("a marker without %s: resent at %v, want never", markerResentAt, got)
	}
	before := time.Now()
	if got := resentAt(marker("yesterday")); got.Before(before) {
		t.Errorf("an unreadable %s: resent at %v, want now (after %v)", markerResentAt, got, before)
	}
}
