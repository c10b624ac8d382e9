package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// TestPingFailsWhileRedisRefusesWrites: a Redis that answers PING but
// refuses every write — a replica (the address names one, or a master a
// failover demoted), a master short of the replicas min-replicas-to-write
// asks for — takes no lease, so Ping, which readiness asks, fails with
// Redis's own words; it answers again once Redis takes writes. A full
// Redis stays pingable: it still replays and renews, and readiness names
// it instead.
func TestPingFailsWhileRedisRefusesWrites(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{URL: srv.URL(), Timeout: time.Second})
	admin := srv.Client(t)
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping of a master = %v", err)
	}
	tests := []struct {
		name   string
		refuse []any // the command that makes Redis refuse writes
		undo   []any
		cause  string
	}{
		{"replica", []any{"REPLICAOF", "127.0.0.1", strconv.Itoa(redistest.FreePort(t))},
			[]any{"REPLICAOF", "NO", "ONE"}, "READONLY"},
		{"too few replicas", []any{"CONFIG", "SET", "min-replicas-to-write", "1"},
			[]any{"CONFIG", "SET", "min-replicas-to-write", "0"}, "NOREPLICAS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := admin.Do(ctx, tt.refuse...).Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Begin(ctx, "k-"+tt.name, store.Lease{}, time.Minute); !strings.Contains(fmtErr(err), tt.cause) {
				t.Fatalf("Begin = %v, want a refusal naming %s", err, tt.cause)
			}
			if err := s.Ping(ctx); !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), tt.cause) {
				t.Errorf("Ping while writes are refused = %v, want ErrUnavailable naming %s", err, tt.cause)
			}
			if err := admin.Do(ctx, tt.undo...).Err(); err != nil {
				t.Fatal(err)
			}
			if err := s.Ping(ctx); err != nil {
				t.Errorf("Ping once writes are taken again = %v", err)
			}
		})
	}
	t.Run("full", func(t *testing.T) {
		if err := admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { admin.ConfigSet(context.Background(), "maxmemory", "0") })
		if _, err := s.Begin(ctx, "k-full", store.Lease{}, time.Minute); !errors.Is(err, store.ErrFull) {
			t.Fatalf("Begin on a full Redis = %v, want ErrFull", err)
		}
		if err := s.Ping(ctx); err != nil {
			t.Errorf("Ping of a full Redis = %v, want nil", err)
		}
	})
}

func fmtErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
