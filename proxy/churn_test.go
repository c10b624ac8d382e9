package proxy

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"maps"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestChurnCountsANewKeyForTheSameRequest sends, on a route in each mode,
// a correct retry (same key, same body), a retry under a fresh key, a new
// operation under a new key and the same body from another client: only
// the fresh key for the same request is churn.
func TestChurnCountsANewKeyForTheSameRequest(t *testing.T) {
	for _, mode := range []Mode{ModeEnforce, ModeShadow} {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t, nil, withPolicy(func(p *Policy) { p.Mode = mode }))
			churned := func() float64 { return testutil.ToFloat64(e.handler.metrics.keyChurn.WithLabelValues(defaultRoute)) }
			steps := []struct {
				name, key, body string
				header          []string
				want            float64
			}{
				{"first", "k1", `{"a":1}`, nil, 0},
				{"retry with its key", "k1", `{"a":1}`, nil, 0},
				{"retry with a fresh key", "k2", `{"a":1}`, nil, 1},
				{"another fresh key", "k3", `{"a":1}`, nil, 2},
				{"a new operation", "k4", `{"a":2}`, nil, 2},
				{"the same body from another client", "k5", `{"a":1}`, []string{"Authorization", "Bearer other"}, 2},
			}
			for _, s := range steps {
				e.do(t, "POST", "/x", s.key, s.body, s.header...)
				if got := churned(); got != s.want {
					t.Fatalf("after %s: key_churn_total = %v, want %v", s.name, got, s.want)
				}
			}
		})
	}
}

// TestChurnOutsideItsWindowIsNotCounted: the same request under a new key
// after churn_window is a new operation.
func TestChurnOutsideItsWindowIsNotCounted(t *testing.T) {
	c := newChurn()
	id := churnIDOf([32]byte{1}, []byte{2})
	at := time.Unix(1_000_000, 0)
	c.observe(id, "a", at, time.Minute, 10)
	if c.observe(id, "b", at.Add(time.Minute+1), time.Minute, 10) {
		t.Error("a new key after churn_window counted as churn")
	}
	if !c.observe(id, "c", at.Add(2*time.Minute), time.Minute, 10) {
		t.Error("a new key within churn_window of the last not counted as churn")
	}
	if !c.observe(id, "d", at.Add(3*time.Minute), time.Minute, 10) {
		t.Error("a new key exactly churn_window after the last not counted as churn")
	}
}

// TestChurnRemembersTheNewestHalfOfMaxEntries: a churn bounded at limit
// fingerprints that has seen limit distinct ones holds all of them, and a
// new key for any of the newest half still counts as churn.
func TestChurnRemembersTheNewestHalfOfMaxEntries(t *testing.T) {
	const limit = 10
	c := newChurn()
	at := time.Unix(1_000_000, 0)
	ids := make([]churnID, limit)
	for i := range ids {
		ids[i] = churnIDOf([32]byte{byte(i)}, nil)
		c.observe(ids[i], "k", at, time.Hour, limit)
	}
	if got := c.len(); got != limit {
		t.Errorf("after %d distinct fingerprints: %d held, want %d", limit, got, limit)
	}
	for i, id := range ids[limit/2:] {
		if !c.observe(id, "other", at, time.Hour, limit) {
			t.Errorf("fingerprint %d of %d under a new key not counted as churn", limit/2+i+1, limit)
		}
	}
}

// TestChurnReportNamesEachChurningScope: two clients each send a request
// again under a fresh key; the report names both scopes by their own
// scope_hash, once each.
func TestChurnReportNamesEachChurningScope(t *testing.T) {
	e := newEnv(t, nil)
	clients := []string{"Bearer a", "Bearer b"}
	want := map[string]uint64{}
	for _, auth := range clients {
		for _, key := range []string{"first-" + auth, "fresh-" + auth} {
			e.do(t, "POST", "/x", key, `{"a":1}`, "Authorization", auth)
		}
		sum := scopeHash(&http.Request{Header: http.Header{"Authorization": {auth}}}, DefaultPolicy().ScopeHeaders)
		want[hex.EncodeToString(sum[:])] = 1
	}
	var got map[string]uint64
	for _, r := range e.handler.Report(time.Hour).Routes {
		if r.Route != defaultRoute {
			continue
		}
		got = map[string]uint64{}
		for _, s := range r.TopChurnScopes {
			got[s.ScopeHash] = s.Churn
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("top churn scopes %v, want %v", got, want)
	}
}

// TestReloadKeepsTheFingerprintsARouteRemembers: a request sent again
// under a fresh key after a reload counts as churn, as it would without
// the reload.
func TestReloadKeepsTheFingerprintsARouteRemembers(t *testing.T) {
	e := newEnv(t, nil)
	churned := func() float64 { return testutil.ToFloat64(e.handler.metrics.keyChurn.WithLabelValues(defaultRoute)) }
	e.do(t, "POST", "/x", "k1", `{"a":1}`)
	if err := e.handler.SetRoutes(DefaultPolicy(), nil); err != nil {
		t.Fatal(err)
	}
	e.do(t, "POST", "/x", "k2", `{"a":1}`)
	if got := churned(); got != 1 {
		t.Errorf("a fresh key after a reload: key_churn_total = %v, want 1", got)
	}
}

// churn_window: 0 turns the count off: a fresh key for the same request is
// not counted, and the route remembers no fingerprint for it.
func TestChurnWindowOfZeroRemembersNothing(t *testing.T) {
	e := newEnv(t, nil, withPolicy(func(p *Policy) { p.ChurnWindow = 0 }))
	e.do(t, "POST", "/x", "k1", `{"a":1}`)
	e.do(t, "POST", "/x", "k2", `{"a":1}`)
	if got := testutil.ToFloat64(e.handler.metrics.keyChurn.WithLabelValues(defaultRoute)); got != 0 {
		t.Errorf("key_churn_total = %v, want 0", got)
	}
	if c := e.handler.routes.Load().fallback.churn; c != nil {
		t.Errorf("the route remembers %d fingerprints, want none kept", c.len())
	}
}

// TestChurnHoldsAtMostMaxEntries feeds a million distinct fingerprints to a
// churn bounded at 100,000: it never holds more, and still counts churn
// among the recent ones. It logs the memory each entry takes.
func TestChurnHoldsAtMostMaxEntries(t *testing.T) {
	const limit, n = 100_000, 1_000_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c := newChurn()
	at := time.Unix(1_000_000, 0)
	var fp [32]byte
	for i := range n {
		binary.LittleEndian.PutUint64(fp[:], uint64(i))
		c.observe(churnIDOf(fp, nil), "k", at, time.Hour, limit)
		if i%100_000 == 0 && c.len() > limit {
			t.Fatalf("after %d fingerprints: %d held, want at most %d", i+1, c.len(), limit)
		}
	}
	if got := c.len(); got > limit {
		t.Fatalf("%d held, want at most %d", got, limit)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("%d fingerprints held in %d bytes of heap, %.0f bytes each (churnEntryBytes %d)",
		c.len(), after.HeapAlloc-before.HeapAlloc, float64(after.HeapAlloc-before.HeapAlloc)/float64(c.len()), churnEntryBytes)
	binary.LittleEndian.PutUint64(fp[:], uint64(n-1))
	if !c.observe(churnIDOf(fp, nil), "other", at, time.Hour, limit) {
		t.Error("the most recent fingerprint under another key not counted as churn")
	}
	runtime.KeepAlive(c)
}

// TestChurnNeverCountsARetryWithItsOwnKey: a request retried with its own
// key is not churn, even after the same request went out under another
// key in between.
func TestChurnNeverCountsARetryWithItsOwnKey(t *testing.T) {
	for _, mode := range []Mode{ModeEnforce, ModeShadow} {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t, nil, withPolicy(func(p *Policy) { p.Mode = mode }))
			churned := func() float64 { return testutil.ToFloat64(e.handler.metrics.keyChurn.WithLabelValues(defaultRoute)) }
			for _, s := range []struct {
				name, key string
				want      float64
			}{
				{"first", "k1", 0},
				{"a fresh key", "k2", 1},
				{"the first key's retry", "k1", 1},
				{"the fresh key's retry", "k2", 1},
			} {
				e.do(t, "POST", "/x", s.key, `{"a":1}`)
				if got := churned(); got != s.want {
					t.Fatalf("after %s: key_churn_total = %v, want %v", s.name, got, s.want)
				}
			}
		})
	}
}

// TestChurnCountsWhileTheStoreIsDown: whether a key is new is the store's
// to say; a store that cannot answer does not hide churn, and a request is
// counted once.
func TestChurnCountsWhileTheStoreIsDown(t *testing.T) {
	st := newFlaky(t)
	e := newEnv(t, nil, withStore(st), withPolicy(func(p *Policy) { p.OnStoreError = FailOpen }))
	st.down.Store(true)
	e.do(t, "POST", "/x", "k1", `{"a":1}`)
	e.do(t, "POST", "/x", "k2", `{"a":1}`)
	if got := testutil.ToFloat64(e.handler.metrics.keyChurn.WithLabelValues(defaultRoute)); got != 1 {
		t.Errorf("key_churn_total = %v with the store down, want 1", got)
	}
}

// TestChurnNeverCountsTheRetryOfAReleasedKey: a key released without a
// record (a release status) is new to the store again, and its retry with
// the same key is still a retry, not churn.
func TestChurnNeverCountsTheRetryOfAReleasedKey(t *testing.T) {
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}, withPolicy(func(p *Policy) { p.ReleaseStatuses = []int{http.StatusServiceUnavailable} }))
	for range 2 {
		if r := e.do(t, "POST", "/x", "k1", `{"a":1}`); r.StatusCode != http.StatusServiceUnavailable || r.replayed() {
			t.Fatalf("%d replayed=%v, want the upstream's 503, executed", r.StatusCode, r.replayed())
		}
		if err := e.handler.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.up.calls.Load(); n != 2 {
		t.Fatalf("upstream executed %d times, want 2: the released key runs again", n)
	}
	if got := testutil.ToFloat64(e.handler.metrics.keyChurn.WithLabelValues(defaultRoute)); got != 0 {
		t.Errorf("key_churn_total = %v, want 0", got)
	}
}
