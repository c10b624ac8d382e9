package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/storetest"
)

// TestRoundTrips counts the commands the server executes per operation,
// from INFO commandstats deltas. Commands a script runs server-side are
// counted too (the get/set/pexpire/del next to evalsha); the round trips are
// the client-issued set, get and evalsha: one per operation.
func TestRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{URL: srv.URL()})
	admin := srv.Client(t)
	ctx := context.Background()
	rec := &store.Record{Status: 200, Body: []byte("ok")}

	// Load the scripts so that later runs take the EVALSHA path.
	warm, err := s.Begin(ctx, "warm", store.Lease{}, time.Minute)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	if err := s.Extend(ctx, "warm", warm.Token, time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if err := s.Complete(ctx, "warm", warm.Token, rec, time.Hour); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	_ = s.Release(ctx, "warm", warm.Token)

	var token string
	steps := []struct {
		name string
		op   func() error
		want map[string]int
	}{
		{"begin miss", func() error {
			b, err := s.Begin(ctx, "k", store.Lease{}, time.Minute)
			token = b.Token
			return err
		}, map[string]int{"set": 1}},
		{"extend", func() error { return s.Extend(ctx, "k", token, time.Minute) }, map[string]int{"evalsha": 1, "get": 1, "pexpire": 1}},
		{"complete", func() error { return s.Complete(ctx, "k", token, rec, time.Hour) }, map[string]int{"evalsha": 1, "get": 1, "set": 1}},
		{"begin on completed", func() error {
			_, err := s.Begin(ctx, "k", store.Lease{}, time.Minute)
			return err
		}, map[string]int{"set": 1}},
		{"inspect", func() error { _, err := s.Inspect(ctx, "k"); return err }, map[string]int{"get": 1, "pttl": 1}},
		{"release", func() error { return s.Release(ctx, "k", token) }, map[string]int{"evalsha": 1, "get": 1}},
	}
	for _, st := range steps {
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatalf("CONFIG RESETSTAT: %v", err)
		}
		if err := st.op(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		got := commandCalls(t, admin)
		if len(got) != len(st.want) {
			t.Errorf("%s: commands %v, want %v", st.name, got, st.want)
			continue
		}
		for cmd, n := range st.want {
			if got[cmd] != n {
				t.Errorf("%s: commands %v, want %v", st.name, got, st.want)
			}
		}
	}
}

// commandCalls parses INFO commandstats, leaving out the admin's own
// CONFIG and INFO commands.
func commandCalls(t *testing.T, admin *redis.Client) map[string]int {
	t.Helper()
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	calls := map[string]int{}
	for line := range strings.Lines(info) {
		// cmdstat_set:calls=1,usec=3,...
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || strings.HasPrefix(name, "config") || name == "info" {
			continue
		}
		n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
		calls[name] = n
	}
	return calls
}

// BenchmarkRedisServer measures the store against a local redis-server:
// one loopback round trip per operation dominates.
func BenchmarkRedisServer(b *testing.B) {
	srv := redistest.Start(b)
	s, err := New(Options{URL: srv.URL()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	storetest.Benchmark(b, s)
}
