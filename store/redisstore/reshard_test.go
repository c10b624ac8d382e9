package redisstore

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/storetest"
)

// TestListingDuringASlotMigrationListsEveryKey: while a Cluster moves a
// slot from one master to another (redis-cli --cluster reshard, or
// rebalance), a key already moved sits on a master that answers MOVED for
// it until the move ends, and one not moved yet on the master that
// answers ASK once it is gone. The listing reads each key where the
// Cluster says it is: every key is listed, on every page size, rather
// than the whole listing failing until the move ends. docs/redis.md,
// "Cluster resharding".
func TestListingDuringASlotMigrationListsEveryKey(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	s := newStore(t, Options{Addrs: cl.Addrs(), Timeout: 5 * time.Second})
	var want []string
	for i := range 12 {
		k := fmt.Sprint("moving-", i)
		b, err := s.Begin(ctx, k, store.Lease{}, time.Minute)
		if err != nil || b.State != store.Acquired {
			t.Fatalf("Begin %s = %v, %v", k, b.State, err)
		}
		if err := s.Complete(ctx, k, b.Token, &store.Record{Status: 201, Body: []byte("ok")}, time.Hour); err != nil {
			t.Fatalf("Complete %s: %v", k, err)
		}
		want = append(want, k)
	}
	slices.Sort(want)

	// moved and left are two keys of different slots, both on src at
	// first; moved is carried to dst, left waits its turn.
	moved, left := want[0], ""
	src := masterClient(ctx, t, cl, moved)
	for _, k := range want[1:] {
		if keySlot(k) != keySlot(moved) && masterClient(ctx, t, cl, k).Options().Addr == src.Options().Addr {
			left = k
			break
		}
	}
	if left == "" {
		t.Fatalf("no key but %s on %s", moved, src.Options().Addr)
	}
	var dst *redis.Client
	for _, m := range cl.Masters {
		if m.Addr() != src.Options().Addr {
			dst = m.Client(t)
			break
		}
	}
	migrate := func(k string) {
		t.Helper()
		slot := keySlot(k)
		srcID, dstID := src.ClusterMyID(ctx).Val(), dst.ClusterMyID(ctx).Val()
		if err := dst.Do(ctx, "cluster", "setslot", slot, "importing", srcID).Err(); err != nil {
			t.Fatalf("CLUSTER SETSLOT %d IMPORTING: %v", slot, err)
		}
		if err := src.Do(ctx, "cluster", "setslot", slot, "migrating", dstID).Err(); err != nil {
			t.Fatalf("CLUSTER SETSLOT %d MIGRATING: %v", slot, err)
		}
		host, port, _ := net.SplitHostPort(dst.Options().Addr)
		if err := src.Do(ctx, "migrate", host, port, "", 0, 5000, "keys", s.redisKey(k)).Err(); err != nil {
			t.Fatalf("MIGRATE %s: %v", k, err)
		}
	}
	// moved's slot is half-way: the key on dst, the slot still src's.
	migrate(moved)
	// left's slot too, but its key not carried yet: on src, which lists
	// it and answers for it as long as it has it.
	if err := dst.Do(ctx, "cluster", "setslot", keySlot(left), "importing", src.ClusterMyID(ctx).Val()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := src.Do(ctx, "cluster", "setslot", keySlot(left), "migrating", dst.ClusterMyID(ctx).Val()).Err(); err != nil {
		t.Fatal(err)
	}

	for _, limit := range []int{1, 5, 100} {
		got := storetest.ListAll(t, s, limit)
		var keys []string
		for _, e := range got {
			keys = append(keys, e.Key)
			if e.State != store.Completed || e.Record == nil || e.Record.Status != 201 {
				t.Errorf("limit %d: %s listed as %v, %+v; want its record", limit, e.Key, e.State, e.Record)
			}
		}
		slices.Sort(keys)
		if !slices.Equal(keys, want) {
			t.Fatalf("limit %d, a slot migrating: listed %q, want %q", limit, keys, want)
		}
	}
	if e, err := s.Inspect(ctx, moved); err != nil || e.State != store.Completed {
		t.Errorf("Inspect %s on its way = %+v, %v; want its record", moved, e, err)
	}
}

// masterClient is a client of the master of cl that holds the store's
// key (whose hash tag is the key itself).
func masterClient(ctx context.Context, t *testing.T, cl *redistest.Cluster, key string) *redis.Client {
	t.Helper()
	slot := keySlot(key)
	for _, m := range cl.Masters {
		c := m.Client(t)
		n, err := c.ClusterCountKeysInSlot(ctx, slot).Result()
		if err != nil {
			t.Fatalf("CLUSTER COUNTKEYSINSLOT on %s: %v", m.Addr(), err)
		}
		if n > 0 {
			return c
		}
	}
	t.Fatalf("no master holds %s", key)
	return nil
}
