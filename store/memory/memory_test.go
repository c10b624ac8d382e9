package memory

import (
	"sync"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store/storetest"
)

// clock is a fake clock safe for concurrent use.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Unix(1_700_000_000, 0)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newTestStore(t *testing.T, opts Options) (*Store, *clock) {
	t.Helper()
	c := newClock()
	opts.Now = c.Now
	s := New(opts)
	t.Cleanup(func() { _ = s.Close() })
	return s, c
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		s, c := newTestStore(t, Options{})
		return storetest.Harness{Store: s, Advance: c.Advance}
	})
}

func BenchmarkStore(b *testing.B) {
	s := New(Options{})
	b.Cleanup(func() { _ = s.Close() })
	storetest.Benchmark(b, s)
}

// The store satisfies the contract the conformance suite proves (and the
// proxy's Store interface, a subset of it).
var _ storetest.Store = (*Store)(nil)
