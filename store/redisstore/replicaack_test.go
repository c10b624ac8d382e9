package redisstore

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// replicated starts a master with one replica and a store on the master
// that waits for one replica, for replica_ack_timeout's default (50 ms).
// Only a test whose replica is paused uses it: a running replica may miss
// so short a window on a busy machine (patientlyReplicated gives it room).
func replicated(t *testing.T) (s *Store, master, replica *redistest.Server) {
	t.Helper()
	master = redistest.Start(t)
	replica = redistest.StartReplica(t, master)
	return newStore(t, Options{URL: master.URL(), ReplicaAck: 1}), master, replica
}

func TestReplicaAckLeaseAndRecordAreOnTheReplica(t *testing.T) {
	s, _, replica := patientlyReplicated(t)
	ctx := context.Background()
	rc := replica.Client(t)
	b, err := s.Begin(ctx, "k", store.Lease{Fingerprint: store.Fingerprint{1}}, time.Minute)
	if err != nil || b.State != store.Acquired {
		t.Fatalf("Begin = %+v, %v; want acquired", b, err)
	}
	// WAIT answered: the replica holds the write without further delay.
	v, err := rc.Get(ctx, s.redisKey("k")).Bytes()
	if err != nil || v[0] != kindLease {
		t.Fatalf("replica's value after Begin = %q, %v; want the lease", v, err)
	}
	if err := s.Complete(ctx, "k", b.Token, &store.Record{Status: 201, Fingerprint: store.Fingerprint{1}}, time.Hour); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	v, err = rc.Get(ctx, s.redisKey("k")).Bytes()
	if err != nil || v[0] != kindRecord {
		t.Fatalf("replica's value after Complete = %q, %v; want the record", v, err)
	}
	if begin, complete := s.ReplicaAckFailures(); begin != 0 || complete != 0 {
		t.Errorf("ReplicaAckFailures = %d, %d; want 0, 0", begin, complete)
	}
}

func TestReplicaAckShortfallReleasesTheLease(t *testing.T) {
	s, master, replica := replicated(t)
	ctx := context.Background()
	replica.Pause()
	t.Cleanup(replica.Resume)
	_, err := s.Begin(ctx, "k", store.Lease{Fingerprint: store.Fingerprint{1}}, time.Minute)
	if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrUnreplicated) {
		t.Fatalf("Begin with the replica paused: %v; want ErrUnavailable, not ErrUnreplicated (the lease is released)", err)
	}
	t.Logf("Begin: %v", err)
	if n := master.Client(t).Exists(ctx, s.redisKey("k")).Val(); n != 0 {
		t.Errorf("key exists on the master after the shortfall (%d): the lease was not released", n)
	}
	if begin, complete := s.ReplicaAckFailures(); begin != 1 || complete != 0 {
		t.Errorf("ReplicaAckFailures = %d, %d; want 1, 0", begin, complete)
	}
}

// TestReplicaAckShortfallOnCompleteIsRetryable stops the replica (SIGSTOP)
// for the completion that must fall short: it acknowledges nothing, however
// long the wait. The lease before it and the retried completion after it
// are acknowledged by a running replica, within patientlyReplicated's wait,
// which leaves a busy machine room.
func TestReplicaAckShortfallOnCompleteIsRetryable(t *testing.T) {
	s, _, replica := patientlyReplicated(t)
	ctx := context.Background()
	// Scripts loaded: the completion below is one EVALSHA and one WAIT, not
	// a NOSCRIPT and a second wait for the stopped replica.
	warm(t, s)
	b, err := s.Begin(ctx, "k", store.Lease{Fingerprint: store.Fingerprint{1}}, time.Minute)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	rec := &store.Record{Status: 201, Fingerprint: store.Fingerprint{1}}
	replica.Pause()
	t.Cleanup(replica.Resume)
	err = s.Complete(ctx, "k", b.Token, rec, time.Hour)
	if !errors.Is(err, store.ErrUnreplicated) || !errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrLockLost) {
		t.Fatalf("Complete with the replica paused: %v; want ErrUnreplicated, an ErrUnavailable (retried), not ErrLockLost", err)
	}
	if v, err := s.c.Get(ctx, s.redisKey("k")).Bytes(); err != nil || v[0] != kindRecord {
		t.Fatalf("master's value after the shortfall = %q, %v; want the record (ErrUnreplicated says it is written)", v, err)
	}
	if begin, complete := s.ReplicaAckFailures(); begin != 0 || complete != 1 {
		t.Errorf("ReplicaAckFailures = %d, %d; want 0, 1", begin, complete)
	}
	replica.Resume()
	// The retry finds its record written and writes it again: the WAIT
	// after it covers the record.
	if err := s.Complete(ctx, "k", b.Token, rec, time.Hour); err != nil {
		t.Fatalf("retried Complete with the replica back: %v", err)
	}
	v, err := replica.Client(t).Get(ctx, s.redisKey("k")).Bytes()
	if err != nil || v[0] != kindRecord {
		t.Fatalf("replica's value after the retried Complete = %q, %v; want the record", v, err)
	}
}

func TestReplicaAckOffSendsNoWait(t *testing.T) {
	master := redistest.Start(t)
	_ = redistest.StartReplica(t, master)
	s := newStore(t, Options{URL: master.URL()})
	ctx := context.Background()
	b, err := s.Begin(ctx, "k", store.Lease{}, time.Minute)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	if err := s.Complete(ctx, "k", b.Token, &store.Record{Status: 200}, time.Hour); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	// The memory-loss markers' check and advance (epoch.go).
	if _, err := s.Health(ctx); err != nil {
		t.Fatalf("Health: %v", err)
	}
	info := master.Client(t).Info(ctx, "commandstats").Val()
	if strings.Contains(info, "cmdstat_wait:") {
		t.Errorf("replica_ack 0 sent WAIT:\n%s", info)
	}
}

// BenchmarkBeginComplete measures a key's Begin and Complete against a
// master with a local replica, without and with replica_ack: 1, for 1, 32
// and 256 concurrent callers. ns/op is wall time per pair (the inverse of
// throughput); us/pair is the mean time one caller waited for its pair.
func BenchmarkBeginComplete(b *testing.B) {
	for _, ack := range []int{0, 1} {
		for _, clients := range []int{1, 32, 256} {
			b.Run("replica_ack="+strconv.Itoa(ack)+"/clients="+strconv.Itoa(clients), func(b *testing.B) {
				s := benchStore(b, ack)
				ctx := context.Background()
				rec := &store.Record{Status: 200, Body: []byte("ok")}
				var next, waited atomic.Int64
				b.ReportAllocs()
				op := func() bool {
					start := time.Now()
					key := "bench-" + strconv.FormatInt(next.Add(1), 10)
					r, err := s.Begin(ctx, key, store.Lease{}, time.Minute)
					if err == nil {
						err = s.Complete(ctx, key, r.Token, rec, time.Minute)
					}
					waited.Add(int64(time.Since(start)))
					return ok(b, s, err)
				}
				b.ResetTimer()
				runClients(b, clients, func(int) func() bool { return op })
				b.ReportMetric(float64(waited.Load())/float64(b.N)/1e3, "us/pair")
				reportShortfalls(b, s)
			})
		}
	}
}

// BenchmarkReplayBesideWrites measures replays (a Begin that finds a
// record) while as many other callers take leases and complete them, so
// that replays and acknowledged writes share batches: us/replay is the
// mean time a replay waited, us/pair that of a Begin and Complete.
func BenchmarkReplayBesideWrites(b *testing.B) {
	for _, ack := range []int{0, 1} {
		for _, clients := range []int{32, 256} {
			b.Run("replica_ack="+strconv.Itoa(ack)+"/clients="+strconv.Itoa(clients), func(b *testing.B) {
				s := benchStore(b, ack)
				ctx := context.Background()
				rec := &store.Record{Status: 200, Body: []byte("ok")}
				done, err := s.Begin(ctx, "done", store.Lease{}, time.Minute)
				if err == nil {
					err = s.Complete(ctx, "done", done.Token, rec, time.Hour)
				}
				if err != nil && !errors.Is(err, store.ErrUnavailable) { // a shortfall: the record is written
					b.Fatal(err)
				}
				var next, replays, replayWait, pairs, pairWait atomic.Int64
				write := func() bool {
					start := time.Now()
					key := "bench-" + strconv.FormatInt(next.Add(1), 10)
					r, err := s.Begin(ctx, key, store.Lease{}, time.Minute)
					if err == nil {
						err = s.Complete(ctx, key, r.Token, rec, time.Minute)
					}
					pairs.Add(1)
					pairWait.Add(int64(time.Since(start)))
					return ok(b, s, err)
				}
				replay := func() bool {
					start := time.Now()
					r, err := s.Begin(ctx, "done", store.Lease{}, time.Minute)
					if err == nil && r.State != store.Completed {
						err = errors.New("replay found " + r.State.String())
					}
					replays.Add(1)
					replayWait.Add(int64(time.Since(start)))
					return ok(b, s, err)
				}
				b.ResetTimer()
				runClients(b, clients, func(i int) func() bool {
					if i%2 == 0 {
						return write
					}
					return replay
				})
				b.ReportMetric(float64(replayWait.Load())/float64(max(replays.Load(), 1))/1e3, "us/replay")
				b.ReportMetric(float64(pairWait.Load())/float64(max(pairs.Load(), 1))/1e3, "us/pair")
				reportShortfalls(b, s)
			})
		}
	}
}

// ok reports whether a benchmark's operation may go on after err: a
// shortfall of replicas (on a busy machine, one that waited past
// replica_ack_timeout) is counted, not fatal.
func ok(b *testing.B, s *Store, err error) bool {
	if err != nil && !(s.acks.n > 0 && errors.Is(err, store.ErrUnavailable) && strings.Contains(err.Error(), "acknowledged")) {
		b.Error(err)
		return false
	}
	return true
}

// reportShortfalls reports the waits for replicas that fell short, per
// operation.
func reportShortfalls(b *testing.B, s *Store) {
	begin, complete := s.ReplicaAckFailures()
	b.ReportMetric(float64(begin+complete)/float64(b.N), "shortfalls/op")
}

// benchStore is a store on a master with a local replica, waiting for ack
// replicas.
func benchStore(b *testing.B, ack int) *Store {
	master := redistest.Start(b)
	_ = redistest.StartReplica(b, master)
	s, err := New(Options{URL: master.URL(), ReplicaAck: ack})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// runClients runs b.N operations over clients concurrent callers, the i-th
// caller running what role(i) returns until it reports a failure.
func runClients(b *testing.B, clients int, role func(i int) func() bool) {
	if clients == 1 {
		op := role(0)
		for i := 0; i < b.N && op(); i++ {
		}
		return
	}
	// RunParallel starts parallelism × GOMAXPROCS goroutines.
	b.SetParallelism(max(clients/runtime.GOMAXPROCS(0), 1))
	var callers atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		op := role(int(callers.Add(1)))
		for pb.Next() && op() {
		}
	})
}
