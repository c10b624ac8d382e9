package proxy

import (
	"encoding/binary"
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
