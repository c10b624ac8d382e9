package redisstore

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// burst runs op for callers × each distinct keys at once and fails the
// test on the first error op reports.
func burst(t *testing.T, callers, each int, op func(key string) error) []string {
	t.Helper()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		keys []string
		errs []error
	)
	start := make(chan struct{})
	for c := range callers {
		wg.Go(func() {
			<-start
			for i := range each {
				key := "burst-" + strconv.Itoa(c) + "-" + strconv.Itoa(i)
				err := op(key)
				mu.Lock()
				keys = append(keys, key)
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d operations failed, the first: %v", len(errs), len(keys), errs[0])
	}
	return keys
}

// TestReplicaAckOneWaitCoversABatch checks that with replica_ack the
// leases and records of concurrent requests are each on the replica the
// moment their Begin or Complete returns, and that they were waited for
// together: fewer WAITs than acknowledged writes.
func TestReplicaAckOneWaitCoversABatch(t *testing.T) {
	s, master, replica := patientlyReplicated(t)
	ctx := context.Background()
	admin, rc := master.Client(t), replica.Client(t)
	rec := &store.Record{Status: 201, Body: []byte("ok")}
	warm(t, s)
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatalf("CONFIG RESETSTAT: %v", err)
	}
	keys := burst(t, 64, 8, func(key string) error {
		b, err := s.Begin(ctx, key, store.Lease{Fingerprint: store.Fingerprint{1}}, time.Minute)
		if err != nil {
			return err
		}
		// The replica holds the lease before Begin returns.
		if v, err := rc.Get(ctx, s.redisKey(key)).Bytes(); err != nil || v[0] != kindLease {
			return errors.New("replica lacks the lease of " + key + " after Begin: " + string(v) + " " + errString(err))
		}
		if err := s.Complete(ctx, key, b.Token, rec, time.Hour); err != nil {
			return err
		}
		if v, err := rc.Get(ctx, s.redisKey(key)).Bytes(); err != nil || v[0] != kindRecord {
			return errors.New("replica lacks the record of " + key + " after Complete: " + errString(err))
		}
		return nil
	})
	calls := commandCalls(t, admin)
	writes := calls["set"] // the leases' SETs and the scripts' SETs
	t.Logf("%d keys: %d WAITs for %d writes", len(keys), calls["wait"], writes)
	if writes != 2*len(keys) {
		t.Fatalf("master ran %d SETs, want %d", writes, 2*len(keys))
	}
	if calls["wait"] == 0 || calls["wait"] >= writes {
		t.Errorf("%d WAITs for %d acknowledged writes; batched writes share a WAIT", calls["wait"], writes)
	}
	if begin, complete := s.ReplicaAckFailures(); begin != 0 || complete != 0 {
		t.Errorf("ReplicaAckFailures = %d, %d; want 0, 0", begin, complete)
	}
}

// TestReplicaAckShortfallFailsEveryWriteOfTheBatch checks that a WAIT that
// falls short fails each write it covers: every lease of a concurrent burst
// is released and its Begin a store error, and every completion of the next
// burst is retryable with its record kept.
func TestReplicaAckShortfallFailsEveryWriteOfTheBatch(t *testing.T) {
	s, master, replica := patientlyReplicated(t)
	ctx := context.Background()
	admin := master.Client(t)
	warm(t, s)
	const callers = 32

	tokens := map[string]string{}
	var mu sync.Mutex
	keys := burst(t, callers, 1, func(key string) error {
		b, err := s.Begin(ctx, key, store.Lease{Fingerprint: store.Fingerprint{1}}, time.Minute)
		mu.Lock()
		tokens[key] = b.Token
		mu.Unlock()
		return err
	})

	replica.Pause()
	t.Cleanup(replica.Resume)
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatalf("CONFIG RESETSTAT: %v", err)
	}
	rec := &store.Record{Status: 201, Fingerprint: store.Fingerprint{1}}
	var wg sync.WaitGroup
	for _, key := range keys {
		wg.Go(func() {
			err := s.Complete(ctx, key, tokens[key], rec, time.Hour)
			if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrLockLost) {
				t.Errorf("Complete %s with the replica paused: %v; want ErrUnavailable, not ErrLockLost", key, err)
			}
		})
	}
	for i := range callers {
		wg.Go(func() {
			key := "new-" + strconv.Itoa(i)
			if _, err := s.Begin(ctx, key, store.Lease{Fingerprint: store.Fingerprint{1}}, time.Minute); !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("Begin %s with the replica paused: %v; want ErrUnavailable", key, err)
			}
		})
	}
	wg.Wait()
	calls := commandCalls(t, admin)
	t.Logf("%d WAITs for %d writes", calls["wait"], 2*callers)
	if calls["wait"] >= 2*callers {
		t.Errorf("%d WAITs for %d writes; batched writes share a WAIT", calls["wait"], 2*callers)
	}
	if begin, complete := s.ReplicaAckFailures(); begin != callers || complete != callers {
		t.Errorf("ReplicaAckFailures = %d, %d; want %d, %d", begin, complete, callers, callers)
	}
	for i := range callers {
		if n := admin.Exists(ctx, s.redisKey("new-"+strconv.Itoa(i))).Val(); n != 0 {
			t.Errorf("lease new-%d is on the master after its shortfall: not released", i)
		}
	}
	for _, key := range keys {
		if v, err := admin.Get(ctx, s.redisKey(key)).Bytes(); err != nil || v[0] != kindRecord {
			t.Errorf("master's value of %s after the shortfall = %q, %v; want the record kept", key, v, err)
		}
	}
}

// TestReplicaAckClusterWaitsOnEachMaster checks batches on a Cluster with
// a replica per master and replica_ack: 1: a concurrent burst's records are
// each on a replica when their Complete returns, every master having been
// waited on; and with one replica paused, the leases on its master fall
// short while the others, in the same batches, do not.
func TestReplicaAckClusterWaitsOnEachMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, redistest.WithReplicas())
	s := newStore(t, Options{Addrs: cl.Addrs(), Timeout: 5 * time.Second, ReplicaAck: 1, ReplicaAckTimeout: 5 * time.Second})
	ctx := context.Background()
	var masters, replicas []*redis.Client
	for _, n := range cl.Masters {
		masters = append(masters, n.Client(t))
	}
	for _, n := range cl.Replicas {
		// A replica answers reads of its slots after READONLY, which
		// holds per connection.
		rc := redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1,
			OnConnect: func(ctx context.Context, cn *redis.Conn) error { return cn.ReadOnly(ctx).Err() }})
		t.Cleanup(func() { _ = rc.Close() })
		replicas = append(replicas, rc)
	}
	rec := &store.Record{Status: 201, Body: []byte("ok")}
	burst(t, 64, 4, func(key string) error {
		b, err := s.Begin(ctx, key, store.Lease{Fingerprint: store.Fingerprint{1}}, time.Minute)
		if err != nil {
			return err
		}
		if err := s.Complete(ctx, key, b.Token, rec, time.Hour); err != nil {
			return err
		}
		for _, rc := range replicas {
			if v, err := rc.Get(ctx, s.redisKey(key)).Bytes(); err == nil && v[0] == kindRecord {
				return nil
			}
		}
		return errors.New("no replica holds the record of " + key + " after Complete")
	})
	for i, m := range masters {
		calls := commandCalls(t, m)
		t.Logf("master %d: %d WAITs for %d writes", i, calls["wait"], calls["set"])
		if calls["wait"] == 0 || calls["wait"] >= calls["set"] {
			t.Errorf("master %d received %d WAITs for %d writes; batched writes share a WAIT", i, calls["wait"], calls["set"])
		}
	}
	if begin, complete := s.ReplicaAckFailures(); begin != 0 || complete != 0 {
		t.Errorf("ReplicaAckFailures = %d, %d; want 0, 0", begin, complete)
	}

	// (A batch that holds a write to the paused replica's master takes
	// replica_ack_timeout, and so does every command in it; a second is
	// room enough for the other masters' replicas on a busy machine.)
	s = newStore(t, Options{Addrs: cl.Addrs(), Timeout: 5 * time.Second, ReplicaAck: 1, ReplicaAckTimeout: time.Second})
	knowsTheCluster(t, s)
	paused, pausedMaster := cl.Replicas[0], cl.Masters[0].Addr()
	paused.Pause()
	t.Cleanup(paused.Resume)
	cc := s.c.(*redis.ClusterClient)
	var wg sync.WaitGroup
	var mu sync.Mutex
	short := 0
	for i := range 64 {
		wg.Go(func() {
			key := "paused-" + strconv.Itoa(i)
			node, err := cc.MasterForKey(ctx, s.redisKey(key))
			if err != nil {
				t.Errorf("MasterForKey: %v", err)
				return
			}
			onPaused := node.Options().Addr == pausedMaster
			_, err = s.Begin(ctx, key, store.Lease{Fingerprint: store.Fingerprint{1}}, time.Minute)
			switch {
			case onPaused && !errors.Is(err, store.ErrUnavailable):
				t.Errorf("Begin %s on the master whose replica is paused: %v; want ErrUnavailable", key, err)
			case !onPaused && err != nil:
				t.Errorf("Begin %s on a master whose replica runs: %v", key, err)
			}
			if onPaused {
				mu.Lock()
				short++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	paused.Resume()
	if begin, _ := s.ReplicaAckFailures(); begin != uint64(short) || short == 0 {
		t.Errorf("%d begin shortfalls counted, want %d (the keys on %s) and some", begin, short, pausedMaster)
	}
}

// patientlyReplicated is replicated with room for a busy machine: a wait
// for the replica that fell short would fail the test, not prove it.
func patientlyReplicated(t *testing.T) (s *Store, master, replica *redistest.Server) {
	t.Helper()
	master = redistest.Start(t)
	replica = redistest.StartReplica(t, master)
	return newStore(t, Options{URL: master.URL(), ReplicaAck: 1, ReplicaAckTimeout: 2 * time.Second, Timeout: 30 * time.Second}), master, replica
}

// warm loads the scripts, so that the commands counted afterwards are
// EVALSHAs, not a NOSCRIPT and its EVAL. A replica slow to acknowledge on
// a busy machine only delays it: the warm key is not what is tested.
func warm(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	token := ""
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if token == "" {
			b, err := s.Begin(ctx, "warm", store.Lease{}, time.Minute)
			if err != nil {
				return err
			}
			token = b.Token
		}
		// A retry stores the same record again, and succeeds.
		return s.Complete(ctx, "warm", token, &store.Record{Status: 200}, time.Hour)
	})
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}
