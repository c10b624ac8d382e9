package filestore

import (
	"os"

	bolt "go.etcd.io/bbolt"

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

// open opens a store in dir on a fake clock, closed at the test's end.
func open(t testing.TB, dir string, opts Options) (*Store, *clock) {
	t.Helper()
	c := newClock()
	opts.Path, opts.Now = dir, c.Now
	if opts.SweepInterval == 0 {
		opts.SweepInterval = -1
	}
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, c
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		s, c := open(t, t.TempDir(), Options{})
		return storetest.Harness{Store: s, Advance: c.Advance}
	})
}

func TestConformanceFsync(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		s, c := open(t, t.TempDir(), Options{Fsync: true})
		return storetest.Harness{Store: s, Advance: c.Advance}
	})
}

func BenchmarkStore(b *testing.B) {
	for _, fsync := range []bool{false, true} {
		name := "nofsync"
		if fsync {
			name = "fsync"
		}
		b.Run(name, func(b *testing.B) {
			s, err := Open(Options{Path: b.TempDir(), Fsync: fsync})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			storetest.Benchmark(b, s)
		})
	}
}

// The store satisfies the contract the conformance suite proves (and the
// proxy's Store interface, a subset of it).
var _ storetest.Store = (*Store)(nil)

type boltTx = bolt.Tx

// TestMain keeps each test's reserve file small: the suite opens dozens
// of stores, and the reserve's size matters only to the full-disk test,
// which sets its own.
func TestMain(m *testing.M) {
	reserveBytes = 64 << 10
	os.Exit(m.Run())
}
