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

// TestReplicaAckFollowsASlotToItsNewMaster: with replica_ack on a Cluster,
// a lease and a record whose slot another master took over (a reshard,
// or a replica promoted) are written and waited for there at once,
// rather than refused until the client next reloads the Cluster's slot
// map; so is one whose slot is on its way, on the master it is going to
// (ASK). docs/redis.md, "Cluster resharding".
func TestReplicaAckFollowsASlotToItsNewMaster(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3, redistest.WithReplicas())
	s := newStore(t, Options{Addrs: cl.Addrs(), Timeout: 10 * time.Second, ReplicaAck: 1, ReplicaAckTimeout: 5 * time.Second})
	// The store learns the slot map before the moves.
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	masters := make([]*redis.Client, len(cl.Masters))
	ids := make([]string, len(cl.Masters))
	for i, m := range cl.Masters {
		masters[i] = m.Client(t)
		ids[i] = masters[i].ClusterMyID(ctx).Val()
	}
	// src and dst: k's master, and another.
	srcOf := func(k string) (src, dst int) {
		t.Helper()
		m, err := cc.MasterForKey(ctx, s.redisKey(k))
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range masters {
			if c.Options().Addr == m.Options().Addr {
				return i, (i + 1) % len(masters)
			}
		}
		t.Fatalf("%s on none of the masters", k)
		return 0, 0
	}
	setslot := func(on, slot int, args ...any) {
		t.Helper()
		if err := masters[on].Do(ctx, append([]any{"cluster", "setslot", slot}, args...)...).Err(); err != nil {
			t.Fatalf("CLUSTER SETSLOT %d %v on %s: %v", slot, args, masters[on].Options().Addr, err)
		}
	}
	// held is where k's value is now: the first byte of it on each
	// master (0 when it has none). ASKING first: a master answers for a
	// slot it is importing only then.
	held := func(k string) []byte {
		t.Helper()
		kinds := make([]byte, len(masters))
		for i, c := range masters {
			var get *redis.StringCmd
			_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Do(ctx, "asking")
				get = p.Get(ctx, s.redisKey(k))
				return nil
			})
			v, err := get.Bytes()
			if err == nil && len(v) > 0 {
				kinds[i] = v[0]
			}
		}
		return kinds
	}
	life := func(k string, on int) {
		t.Helper()
		b, err := s.Begin(ctx, k, store.Lease{}, time.Minute)
		if err != nil || b.State != store.Acquired {
			t.Fatalf("Begin %s = %v, %v; want the lease", k, b.State, err)
		}
		if got := held(k); got[on] != kindLease {
			t.Fatalf("after Begin %s the masters hold %q; want its lease on %s", k, got, masters[on].Options().Addr)
		}
		if err := s.Complete(ctx, k, b.Token, &store.Record{Status: 201}, time.Hour); err != nil {
			t.Fatalf("Complete %s: %v", k, err)
		}
		if got := held(k); got[on] != kindRecord {
			t.Fatalf("after Complete %s the masters hold %q; want its record on %s", k, got, masters[on].Options().Addr)
		}
	}

	// large's lease is taken on src, then its slot goes over to dst with
	// the lease; its record, too large to be batched, is written there.
	large := "slot-moved-with-its-lease"
	b, err := s.Begin(ctx, large, store.Lease{}, time.Minute)
	if err != nil || b.State != store.Acquired {
		t.Fatalf("Begin %s = %v, %v", large, b.State, err)
	}
	src, dst := srcOf(large)
	slot := keySlot(large)
	setslot(dst, slot, "importing", ids[src])
	setslot(src, slot, "migrating", ids[dst])
	host, port, _ := net.SplitHostPort(masters[dst].Options().Addr)
	if err := masters[src].Do(ctx, "migrate", host, port, "", 0, 5000, "keys", s.redisKey(large)).Err(); err != nil {
		t.Fatalf("MIGRATE %s: %v", large, err)
	}
	for i := range masters {
		setslot(i, slot, "node", ids[dst])
	}
	body := make([]byte, 2*maxPipelined)
	if err := s.Complete(ctx, large, b.Token, &store.Record{Status: 201, Body: body}, time.Hour); err != nil {
		t.Fatalf("Complete %s after its slot moved: %v", large, err)
	}
	if got := held(large); got[dst] != kindRecord {
		t.Fatalf("after Complete %s the masters hold %q; want its record on %s", large, got, masters[dst].Options().Addr)
	}

	// moved's slot goes over to dst for good.
	moved := "slot-moved"
	src, dst = srcOf(moved)
	slot = keySlot(moved)
	setslot(dst, slot, "importing", ids[src])
	setslot(src, slot, "migrating", ids[dst])
	for i := range masters {
		setslot(i, slot, "node", ids[dst])
	}
	life(moved, dst)

	// moving's slot is on its way to dst: a key src does not have is
	// written on dst.
	moving := "slot-moving"
	src, dst = srcOf(moving)
	slot = keySlot(moving)
	setslot(dst, slot, "importing", ids[src])
	setslot(src, slot, "migrating", ids[dst])
	life(moving, dst)
}
