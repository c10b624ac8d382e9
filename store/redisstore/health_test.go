package redisstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// TestHealthReportsEvictionPolicy starts Redis with each kind of policy and
// checks that only noeviction counts as safe, with CONFIG available or
// disabled (as managed services do; INFO then gives the policy).
func TestHealthReportsEvictionPolicy(t *testing.T) {
	tests := []struct {
		policy       string
		noConfig     bool
		wantUnsafe   bool
		wantReported string
	}{
		{"noeviction", false, false, "noeviction"},
		{"allkeys-lru", false, true, "allkeys-lru"},
		{"volatile-lru", false, true, "volatile-lru"},
		{"volatile-lru", true, true, "volatile-lru"},
		{"noeviction", true, false, "noeviction"},
	}
	for _, tt := range tests {
		name := tt.policy
		if tt.noConfig {
			name += " without CONFIG"
		}
		t.Run(name, func(t *testing.T) {
			args := []string{"--maxmemory-policy", tt.policy}
			if tt.noConfig {
				args = append(args, "--include", noConfigFile(t))
			}
			srv := redistest.Start(t, args...)
			s := newStore(t, Options{URL: srv.URL()})
			if tt.noConfig {
				if err := s.c.ConfigGet(context.Background(), "maxmemory-policy").Err(); err == nil {
					t.Fatal("CONFIG GET works on a server with CONFIG renamed away")
				}
			}
			h, err := s.Health(context.Background())
			if err != nil {
				t.Fatalf("Health: %v", err)
			}
			if h.EvictionPolicy != tt.wantReported || h.EvictionUnsafe != tt.wantUnsafe || h.Full {
				t.Fatalf("Health = %+v, want policy %s, unsafe %v, not full", h, tt.wantReported, tt.wantUnsafe)
			}
			if !strings.HasPrefix(h.Server, "redis 7.") && !strings.HasPrefix(h.Server, "redis 8.") {
				t.Fatalf("Health server = %q, want redis and its version", h.Server)
			}
		})
	}
}

// noConfigFile writes a config file that renames CONFIG away: the command
// line cannot express an empty name.
func noConfigFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "no-config.conf")
	if err := os.WriteFile(path, []byte("rename-command CONFIG \"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestHealthChecksEveryClusterMaster sets one master of three to an evicting
// policy: the store as a whole is then unsafe.
func TestHealthChecksEveryClusterMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s := newStore(t, Options{Addrs: cl.Addrs()})
	ctx := context.Background()
	if h, err := s.Health(ctx); err != nil || h.EvictionUnsafe || h.EvictionPolicy != "noeviction" {
		t.Fatalf("Health of a noeviction cluster = %+v, %v; want safe", h, err)
	}
	if err := cl.Nodes[2].Client(t).ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatalf("CONFIG SET: %v", err)
	}
	h, err := s.Health(ctx)
	if err != nil || !h.EvictionUnsafe || !strings.Contains(h.EvictionPolicy, "allkeys-lru") {
		t.Fatalf("Health with one allkeys-lru master = %+v, %v; want unsafe naming allkeys-lru", h, err)
	}
}

// TestErrorsNameTheirCause: a wrong address, a missing or wrong password and
// a database out of range each fail every operation with ErrUnavailable and
// Redis's own words, not only a deadline.
func TestErrorsNameTheirCause(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "secret")
	free := redistest.FreePort(t)
	tests := []struct{ name, url, cause string }{
		{"wrong address", fmt.Sprintf("redis://127.0.0.1:%d/0", free), "connection refused"},
		{"missing password", srv.URL(), "NOAUTH"},
		{"wrong password", "redis://:nope@" + srv.Addr() + "/0", "WRONGPASS"},
		{"database out of range", "redis://:secret@" + srv.Addr() + "/99", "DB index is out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, Options{URL: tt.url, Timeout: time.Second})
			// With replica_ack, each write is followed by a WAIT: in a batch,
			// or on a connection of its own for a large record.
			acked := newStore(t, Options{URL: tt.url, Timeout: time.Second, ReplicaAck: 1})
			large := &store.Record{Status: 200, Body: make([]byte, maxPipelined+1)}
			ctx := context.Background()
			ops := map[string]func() error{
				"ping":   func() error { return s.Ping(ctx) },
				"health": func() error { _, err := s.Health(ctx); return err },
				"begin":  func() error { _, err := s.Begin(ctx, "k", store.Lease{}, time.Minute); return err },
				"extend": func() error { return s.Extend(ctx, "k", "t", time.Minute) },
				"list":   func() error { _, _, err := s.List(ctx, 0, "", 10); return err },
				"begin with replica_ack": func() error {
					_, err := acked.Begin(ctx, "k", store.Lease{}, time.Minute)
					return err
				},
				"complete of a large record with replica_ack": func() error {
					return acked.Complete(ctx, "k", "t", large, time.Minute)
				},
			}
			for op, fn := range ops {
				err := fn()
				if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), tt.cause) {
					t.Errorf("%s = %v, want ErrUnavailable naming %q", op, err, tt.cause)
				}
			}
		})
	}
}
