package redisstore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/storetest"
)

// TestConformanceWithTombstones runs the suite on a redis-server and on a
// Cluster with Begin looking for tombstones in every case.
func TestConformanceWithTombstones(t *testing.T) {
	t.Run("redis-server", func(t *testing.T) {
		srv := redistest.Start(t)
		s := newStore(t, Options{URL: srv.URL(), Timeout: 2 * time.Second})
		storetest.Run(t, func(*testing.T) storetest.Harness {
			s.CheckTombstones(true)
			return storetest.Harness{Store: s}
		})
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3)
		s := newStore(t, Options{Addrs: cl.Addrs(), Timeout: 2 * time.Second})
		storetest.Run(t, func(*testing.T) storetest.Harness {
			s.CheckTombstones(true)
			return storetest.Harness{Store: s}
		})
	})
}

// TestTombstonesCostNoRoundTrip counts the commands the client sends per
// operation with tombstones on: a Begin that takes a lease, finds a record
// or finds a tombstone is one script, and a completion that writes a
// record and its tombstone is one script, also through store.Tombstones. The GETs and SETs the scripts
// run are counted next to them.
func TestTombstonesCostNoRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{URL: srv.URL()})
	// Through the layer the proxy keeps tombstones with: over this store
	// it steps aside.
	ts := store.WithTombstones(s, nil)
	ts.Check(true)
	admin := srv.Client(t)
	ctx := context.Background()
	fp := store.Fingerprint{4}
	rec := &store.Record{Status: 200, Body: []byte("ok"), Fingerprint: fp, Tombstone: time.Hour}

	warm, err := ts.Begin(ctx, "warm", store.Lease{Fingerprint: fp}, time.Minute)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	if err := ts.Complete(ctx, "warm", warm.Token, rec, time.Hour); err != nil {
		t.Fatalf("Complete: %v", err)
	}

	var b store.BeginResult
	begin := func(want store.State) func() error {
		return func() error {
			var err error
			b, err = ts.Begin(ctx, "k", store.Lease{Fingerprint: fp}, time.Minute)
			if err == nil && b.State != want {
				err = errors.New("Begin found " + b.State.String() + ", want " + want.String())
			}
			return err
		}
	}
	steps := []struct {
		name string
		op   func() error
		want map[string]int
	}{
		// The record, the tombstone and an earlier version's tombstone
		// are read, then the lease written.
		{"begin miss", begin(store.Acquired), map[string]int{"evalsha": 1, "get": 3, "set": 1}},
		{"complete with tombstone", func() error { return ts.Complete(ctx, "k", b.Token, rec, time.Hour) },
			map[string]int{"evalsha": 1, "get": 1, "set": 2}},
		{"begin on completed", begin(store.Completed), map[string]int{"evalsha": 1, "get": 1}},
		{"begin on expired", func() error {
			// The record goes, as it does at its ttl; its tombstone stays.
			if err := admin.Del(ctx, s.redisKey("k")).Err(); err != nil {
				return err
			}
			if err := admin.ConfigResetStat(ctx).Err(); err != nil {
				return err
			}
			return begin(store.Expired)()
		}, map[string]int{"evalsha": 1, "get": 2}},
	}
	for _, st := range steps {
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatalf("CONFIG RESETSTAT: %v", err)
		}
		if err := st.op(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		got := commandCalls(t, admin)
		delete(got, "del") // the test's own
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
	if b.Fingerprint != fp || b.ExpiredAt.IsZero() {
		t.Errorf("Begin on the expired key = %+v, want its fingerprint and when it expired", b)
	}

	// Off, Begin is the SET NX PX GET it is without tombstones.
	ts.Check(false)
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatalf("CONFIG RESETSTAT: %v", err)
	}
	if _, err := ts.Begin(ctx, "off", store.Lease{Fingerprint: fp}, time.Minute); err != nil {
		t.Fatalf("Begin: %v", err)
	}
	if got := commandCalls(t, admin); len(got) != 1 || got["set"] != 1 {
		t.Errorf("Begin with tombstones off: commands %v, want one set", got)
	}
}

// TestTombstoneSharesItsRecordsSlot checks where a tombstone lives: under
// its record's Redis key and the suffix, after the braces, so that a
// Cluster hashes both to one slot.
func TestTombstoneSharesItsRecordsSlot(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{URL: srv.URL(), KeyPrefix: "p:"})
	ctx := context.Background()
	b, err := s.Begin(ctx, "abc", store.Lease{}, time.Minute)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	if err := s.Complete(ctx, "abc", b.Token, &store.Record{Status: 200, Tombstone: time.Hour}, time.Hour); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	keys := srv.Client(t).Keys(ctx, "p:*").Val()
	if len(keys) != 2 || !slices.Contains(keys, "p:{abc}") || !slices.Contains(keys, "p:{abc}"+store.TombstoneSuffix) {
		t.Fatalf("keys = %q, want the record p:{abc} and its tombstone p:{abc}%s", keys, store.TombstoneSuffix)
	}
	v := srv.Client(t).Get(ctx, "p:{abc}"+store.TombstoneSuffix).Val()
	if len(v) != tombstoneLen || v[0] != kindTombstone {
		t.Errorf("tombstone value = %q, want %d bytes of kind %c", v, tombstoneLen, kindTombstone)
	}
}

// TestEarlierTombstoneIsHonoured checks a rolling upgrade: a tombstone an
// earlier version kept through store.Tombstones (a record under the key
// followed by the suffix, inside the braces: in a Cluster, another slot)
// still refuses its key, is not listed, and goes when the key is deleted.
func TestEarlierTombstoneIsHonoured(t *testing.T) {
	t.Run("redis-server", func(t *testing.T) {
		srv := redistest.Start(t)
		testEarlierTombstone(t, newStore(t, Options{URL: srv.URL()}), srv.Client(t))
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3)
		admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
		t.Cleanup(func() { _ = admin.Close() })
		testEarlierTombstone(t, newStore(t, Options{Addrs: cl.Addrs(), Timeout: 2 * time.Second}), admin)
	})
}

func testEarlierTombstone(t *testing.T, s *Store, admin redis.UniversalClient) {
	s.CheckTombstones(true)
	ctx := context.Background()
	fp := store.Fingerprint{5}
	at := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	old := store.AppendRecord([]byte{kindRecord}, &store.Record{Status: 410, Fingerprint: fp, CreatedAt: at})
	legacy := s.redisKey("k" + store.TombstoneSuffix)
	if err := admin.Set(ctx, legacy, old, time.Hour).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	b, err := s.Begin(ctx, "k", store.Lease{Fingerprint: fp}, time.Minute)
	if err != nil || b.State != store.Expired || b.Fingerprint != fp || !b.ExpiredAt.Equal(at) {
		t.Fatalf("Begin = %+v, %v; want expired at %v with the earlier tombstone's fingerprint", b, err, at)
	}
	if n := admin.Exists(ctx, s.redisKey("k")).Val(); n != 0 {
		t.Errorf("Begin on an expired key left a lease")
	}
	entries, _, err := s.List(ctx, 0, "", 100)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Key, store.TombstoneSuffix) {
			t.Errorf("List shows the earlier tombstone %q", e.Key)
		}
	}
	if err := s.Delete(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Delete of a key with only a tombstone = %v, want ErrNotFound", err)
	}
	if n := admin.Exists(ctx, legacy).Val(); n != 0 {
		t.Errorf("the earlier tombstone outlived Delete")
	}
	if b, err := s.Begin(ctx, "k", store.Lease{Fingerprint: fp}, time.Minute); err != nil || b.State != store.Acquired {
		t.Errorf("Begin after Delete = %+v, %v; want acquired", b, err)
	}
}
