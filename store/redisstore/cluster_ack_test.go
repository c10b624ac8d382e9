package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/storetest"
)

// TestReplicaAckOnAClusterWaitsForTheKeysMaster: on a Cluster with a
// replica per master and replica_ack: 1, a lease or record is on the
// replica of the key's own master once the store answers, and a replica
// that lags fails the keys of its master only — the wait goes to the
// key's master, not to whichever node a keyless command lands on. The
// conformance suite holds on the same Cluster. docs/redis.md, "Waiting for
// replicas".
func TestReplicaAckOnAClusterWaitsForTheKeysMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, redistest.WithReplicas())
	// Generous timeouts: the suite checks semantics on a busy machine, where
	// a replica that keeps up may still take a few hundred milliseconds to
	// acknowledge. Only the lagging-replica case below needs a short wait,
	// and it has a store of its own.
	s := newStore(t, Options{Addrs: cl.Addrs(), Timeout: 10 * time.Second, ReplicaAck: 1, ReplicaAckTimeout: 5 * time.Second})
	ctx := context.Background()

	t.Run("conformance", func(t *testing.T) {
		// Leases outlast a replica's acknowledgement of the write before.
		storetest.Run(t, func(*testing.T) storetest.Harness { return storetest.Harness{Store: s, Lease: 2 * time.Second} })
	})

	// Which master holds a key, as the Cluster sees it.
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	masterOf := func(key string) int {
		t.Helper()
		m, err := cc.MasterForKey(ctx, s.redisKey(key))
		if err != nil {
			t.Fatalf("MasterForKey %s: %v", key, err)
		}
		for i, n := range cl.Masters {
			if n.Addr() == m.Options().Addr {
				return i
			}
		}
		t.Fatalf("key %s on %s, which is none of the masters", key, m.Options().Addr)
		return -1
	}
	// A replica answers reads of its own slots only after READONLY.
	replicas := make([]*redis.Client, len(cl.Replicas))
	for i, r := range cl.Replicas {
		replicas[i] = redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1,
			OnConnect: func(ctx context.Context, cn *redis.Conn) error { return cn.ReadOnly(ctx).Err() }})
		t.Cleanup(func() { _ = replicas[i].Close() })
	}
	// kind is the first byte of key's value on the replica of master m
	// ('L' lease, 'R' record), or 0 when the replica does not hold it.
	kind := func(m int, key string) byte {
		t.Helper()
		v, err := replicas[m].Get(ctx, s.redisKey(key)).Bytes()
		if errors.Is(err, redis.Nil) {
			return 0
		}
		if err != nil || len(v) == 0 {
			t.Fatalf("GET %s on the replica of master %d: %q, %v", key, m, v, err)
		}
		return v[0]
	}
	// Keys until every master holds three.
	byMaster := make([][]string, len(cl.Masters))
	for i := 0; i < 1000 && !everyHas(byMaster, 3); i++ {
		key := fmt.Sprint("acked-", i)
		if m := masterOf(key); len(byMaster[m]) < 3 {
			byMaster[m] = append(byMaster[m], key)
		}
	}
	if !everyHas(byMaster, 3) {
		t.Fatalf("keys by master after 1000 tries: %v", byMaster)
	}

	t.Run("on the replica of the key's master", func(t *testing.T) {
		for m, keys := range byMaster {
			key := keys[0]
			b, err := s.Begin(ctx, key, store.Lease{Fingerprint: store.Fingerprint{1}}, time.Minute)
			if err != nil || b.State != store.Acquired {
				t.Fatalf("Begin %s = %+v, %v; want acquired", key, b, err)
			}
			// The wait answered: the replica holds the write already.
			if k := kind(m, key); k != kindLease {
				t.Errorf("replica of master %d after Begin %s holds %q, want the lease", m, key, k)
			}
			rec := &store.Record{Status: 201, Body: []byte("acked"), Fingerprint: store.Fingerprint{1}}
			if err := s.Complete(ctx, key, b.Token, rec, time.Hour); err != nil {
				t.Fatalf("Complete %s: %v", key, err)
			}
			if k := kind(m, key); k != kindRecord {
				t.Errorf("replica of master %d after Complete %s holds %q, want the record", m, key, k)
			}
		}
	})

	t.Run("a lagging replica fails its master's keys only", func(t *testing.T) {
		const lagging = 0
		// The lagging master's writes go through a store that waits
		// briefly, so that the replica stays paused for well under
		// cluster-node-timeout (2 s) and the Cluster does not mark it
		// failed meanwhile. The other masters' writes go through s, whose
		// long wait a replica that keeps up always meets: were the wait
		// sent to the lagging master instead, they would fail.
		//
		// The replica is stopped (SIGSTOP), not slowed: it acknowledges
		// nothing however long the wait, and the short wait answers for the
		// keys of its master alone.
		short := newStore(t, Options{Addrs: cl.Addrs(), Timeout: 10 * time.Second, ReplicaAck: 1, ReplicaAckTimeout: 300 * time.Millisecond})
		knowsTheCluster(t, short)
		// A lease taken before the lag, to be completed during it.
		held := byMaster[lagging][1]
		b, err := s.Begin(ctx, held, store.Lease{Fingerprint: store.Fingerprint{2}}, time.Minute)
		if err != nil {
			t.Fatalf("Begin %s: %v", held, err)
		}
		cl.Replicas[lagging].Pause()
		t.Cleanup(cl.Replicas[lagging].Resume)
		rec := &store.Record{Status: 201, Body: []byte("late"), Fingerprint: store.Fingerprint{2}}
		beginErr := make([]error, len(byMaster))
		var completeErr error
		var wg sync.WaitGroup
		wg.Go(func() { completeErr = short.Complete(ctx, held, b.Token, rec, time.Hour) })
		wg.Go(func() {
			_, beginErr[lagging] = short.Begin(ctx, byMaster[lagging][2], store.Lease{Fingerprint: store.Fingerprint{3}}, time.Minute)
		})
		for m := range byMaster {
			if m != lagging {
				_, beginErr[m] = s.Begin(ctx, byMaster[m][2], store.Lease{Fingerprint: store.Fingerprint{3}}, time.Minute)
			}
		}
		wg.Wait()
		cl.Replicas[lagging].Resume()

		if !errors.Is(completeErr, store.ErrUnavailable) || errors.Is(completeErr, store.ErrLockLost) {
			t.Errorf("Complete on the lagging replica's master: %v, want ErrUnavailable (to be retried)", completeErr)
		}
		for m, err := range beginErr {
			switch {
			case m == lagging && !errors.Is(err, store.ErrUnavailable):
				t.Errorf("Begin on the lagging replica's master: %v, want ErrUnavailable", err)
			case m != lagging && err != nil:
				t.Errorf("Begin on master %d, whose replica keeps up: %v, want the lease", m, err)
			}
		}
		if begin, complete := short.ReplicaAckFailures(); begin != 1 || complete != 1 {
			t.Errorf("ReplicaAckFailures of the lagging master's store: %d, %d; want 1, 1 (Begin: %v; Complete: %v)",
				begin, complete, beginErr[lagging], completeErr)
		}
		if begin, complete := s.ReplicaAckFailures(); begin != 0 || complete != 0 {
			t.Errorf("ReplicaAckFailures of the other masters' store: %d, %d; want 0, 0", begin, complete)
		}
		// The retry once the replica is back writes the record again and
		// waits for it on the same master.
		if err := s.Complete(ctx, held, b.Token, rec, time.Hour); err != nil {
			t.Fatalf("Complete retried with the replica back: %v", err)
		}
		if k := kind(lagging, held); k != kindRecord {
			t.Errorf("replica after the retried Complete holds %q, want the record", k)
		}
	})
}

// knowsTheCluster has s's Cluster client fetch the slot map and the
// command table now. It would otherwise fetch them at its first command,
// each from a node picked at random: from a paused node, that command
// would wait out its deadline and fail for a reason other than the one the
// test injects. A keyed read needs both (the slot map to route it, the
// command table for its routing policy) and waits for no replica.
func knowsTheCluster(t *testing.T, s *Store) {
	t.Helper()
	cc := s.c.(*redis.ClusterClient)
	if err := cc.Exists(context.Background(), s.redisKey("cluster-known")).Err(); err != nil {
		t.Fatalf("EXISTS through the store's Cluster client: %v", err)
	}
}

func everyHas(byMaster [][]string, n int) bool {
	for _, keys := range byMaster {
		if len(keys) < n {
			return false
		}
	}
	return true
}
