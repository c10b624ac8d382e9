package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/storetest"
)

// The store satisfies the contract the conformance suite proves (and the
// proxy's Store interface, a subset of it).
var _ storetest.Store = (*Store)(nil)

func newStore(t *testing.T, opts Options) *Store {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatalf("New(%+v): %v", opts, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformanceMiniredis(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		m := miniredis.RunT(t)
		return storetest.Harness{Store: newStore(t, Options{URL: "redis://" + m.Addr()}), Advance: m.FastForward}
	})
}

func TestConformanceRedisServer(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{URL: srv.URL(), Timeout: 2 * time.Second})
	storetest.Run(t, func(*testing.T) storetest.Harness { return storetest.Harness{Store: s} })
}

func TestKeyLayout(t *testing.T) {
	m := miniredis.RunT(t)
	s := newStore(t, Options{URL: "redis://" + m.Addr(), KeyPrefix: "p:"})
	ctx := context.Background()
	b, err := s.Begin(ctx, "abc", store.Lease{Fingerprint: store.Fingerprint{7}}, time.Minute)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	if got, want := m.Keys(), []string{"p:{abc}"}; len(got) != 1 || got[0] != want[0] {
		t.Fatalf("keys = %q, want %q", got, want)
	}
	v, _ := m.Get("p:{abc}")
	if got, want := v, "L\x07"+string(make([]byte, 31))+b.Token; got != want {
		t.Fatalf("lease value = %q, want %q", got, want)
	}
	if ttl := m.TTL("p:{abc}"); ttl != time.Minute {
		t.Fatalf("lease TTL = %v, want 1m", ttl)
	}
}

func TestCorruptValue(t *testing.T) {
	m := miniredis.RunT(t)
	s := newStore(t, Options{URL: "redis://" + m.Addr()})
	ctx := context.Background()
	for name, v := range map[string]string{"unknown kind": "X", "bad record": "R\x01", "short lease": "L\x01"} {
		t.Run(name, func(t *testing.T) {
			m.Set("idem:{k}", v)
			if _, err := s.Begin(ctx, "k", store.Lease{}, time.Minute); !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("Begin on %q = %v, want ErrCorrupt", v, err)
			}
		})
	}
}

// TestUnavailable checks that a dead or hung server yields ErrUnavailable
// within the per-operation timeout.
func TestUnavailable(t *testing.T) {
	const timeout = 100 * time.Millisecond
	const margin = 150 * time.Millisecond
	tests := []struct {
		name  string
		fault func(*redistest.Server)
	}{
		{"killed", (*redistest.Server).Kill},
		{"hung", (*redistest.Server).Pause},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.Start(t)
			s := newStore(t, Options{URL: srv.URL(), Timeout: timeout})
			ctx := context.Background()
			if _, err := s.Begin(ctx, "warm", store.Lease{}, time.Minute); err != nil {
				t.Fatalf("Begin before the fault: %v", err)
			}
			tt.fault(srv)
			ops := map[string]func() error{
				"begin":   func() error { _, err := s.Begin(ctx, "k", store.Lease{}, time.Minute); return err },
				"inspect": func() error { _, err := s.Inspect(ctx, "k"); return err },
				"health":  func() error { _, err := s.Health(ctx); return err },
				"complete": func() error {
					return s.Complete(ctx, "k", "t", &store.Record{Status: 200}, time.Minute)
				},
				"ping": func() error { return s.Ping(ctx) },
			}
			for name, op := range ops {
				start := time.Now()
				err := op()
				elapsed := time.Since(start)
				if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, redis.Nil) {
					t.Errorf("%s = %v, want ErrUnavailable", name, err)
				}
				// One retry is allowed, each attempt bounded by the timeout
				// of the operation's context.
				if elapsed > timeout+margin {
					t.Errorf("%s took %v, want < %v", name, elapsed, timeout+margin)
				}
			}
		})
	}
}

func TestServerRestartRecovers(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{URL: srv.URL()})
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	srv.Restart()
	// The pooled connection is dead; the first command reconnects.
	if _, err := s.Begin(ctx, "k", store.Lease{}, time.Minute); err != nil {
		t.Fatalf("Begin after restart: %v", err)
	}
}

func TestNewRejectsNoTarget(t *testing.T) {
	for name, opts := range map[string]Options{"empty": {}, "bad url": {URL: "http://x"}} {
		if _, err := New(opts); err == nil {
			t.Errorf("New(%s) succeeded, want an error", name)
		}
	}
}

// TestRetrySafety covers a command executed by Redis whose reply was lost
// and that the client then retried, on leases of either layout.
func TestRetrySafety(t *testing.T) {
	fp := store.Fingerprint{3}
	bare := append(append([]byte{kindLease}, fp[:]...), "0123456789abcdef0123456789abcdef"...)
	desc := store.Lease{Fingerprint: fp, Request: store.Request{Method: "POST", Path: "/p"}, Instance: "p/1"}
	described := store.AppendLease(bare[:len(bare):len(bare)], &desc)
	tests := []struct {
		name  string
		value []byte
		token string
		want  store.State
		lease store.Lease
	}{
		{"own lease found by a retried SET", described, "0123456789abcdef0123456789abcdef", store.Acquired, store.Lease{}},
		{"another owner's lease", described, "ffffffffffffffffffffffffffffffff", store.InFlight, desc},
		{"own undescribed lease", bare, "0123456789abcdef0123456789abcdef", store.Acquired, store.Lease{}},
		{"another owner's undescribed lease", bare, "ffffffffffffffffffffffffffffffff", store.InFlight, store.Lease{Fingerprint: fp}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := decodeExisting(tt.value, tt.token)
			if err != nil || b.State != tt.want || b.Fingerprint != fp || b.Lease != tt.lease {
				t.Fatalf("decodeExisting = %+v, %v; want %v with fp and lease %+v", b, err, tt.want, tt.lease)
			}
			if (b.Token != "") != (tt.want == store.Acquired) {
				t.Fatalf("token = %q for state %v", b.Token, b.State)
			}
		})
	}
}
