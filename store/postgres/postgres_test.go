package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest"
	"github.com/idempotency-proxy/idempotency-proxy/store/storetest"
)

// The store satisfies the contract the conformance suite proves.
var _ storetest.Store = (*Store)(nil)

// testTimeout bounds each operation of the package's tests. They check what
// the store does, not how fast: on a busy machine under -race a case of a few
// operations, new connections' SCRAM handshakes among them, has taken over
// 3 s against a bound of 5 s per operation. No test waits for it to pass.
const testTimeout = 30 * time.Second

// conformanceLease is the lease of the conformance suite's expiry cases:
// longer than one operation takes on a busy machine, a new connection's
// handshake included, so that no case's lease runs out between two of its
// operations, and short enough that the suite's waits for it stay brief.
const conformanceLease = 2 * time.Second

// newStore opens a store on srv with opts, prepared, closed in t.Cleanup,
// with testTimeout unless opts sets one.
func newStore(t *testing.T, srv *pgtest.Server, opts Options) *Store {
	t.Helper()
	return openStore(t, srv, "", opts)
}

// openStore is newStore reaching srv through addr (a fault proxy; "" for
// the server itself).
func openStore(t *testing.T, srv *pgtest.Server, addr string, opts Options) *Store {
	t.Helper()
	opts.URL = srv.URL()
	if addr != "" {
		opts.URL = strings.Replace(opts.URL, srv.Addr(), addr, 1)
	}
	if opts.Timeout == 0 {
		opts.Timeout = testTimeout
	}
	s, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Prepare(context.Background()); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	srv := pgtest.Start(t)
	// The sweeper is off: an expired row must be absent by itself, not
	// because it happened to be deleted (the sweep has its own test). The
	// cache is on, as by default: a replay it answers keeps the contract.
	s := newStore(t, srv, Options{Table: "conformance", SweepInterval: -1, CacheBytes: DefaultCacheBytes})
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		return storetest.Harness{Store: s, Lease: conformanceLease}
	})
}

// BenchmarkStore measures the store as configured by default, its cache
// on; BenchmarkStoreWithoutCache with cache_bytes: 0.
func BenchmarkStore(b *testing.B) {
	benchmarkStore(b, Options{}.Defaults().(Options))
}

func BenchmarkStoreWithoutCache(b *testing.B) {
	opts := Options{}.Defaults().(Options)
	opts.CacheBytes = 0
	benchmarkStore(b, opts)
}

func benchmarkStore(b *testing.B, opts Options) {
	srv := pgtest.Start(b)
	opts.URL = srv.URL()
	s, err := New(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	if err := s.Prepare(context.Background()); err != nil {
		b.Fatal(err)
	}
	storetest.Benchmark(b, s)
}
