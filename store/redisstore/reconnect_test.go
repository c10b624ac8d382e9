package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testbin"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// TestReconnectsWhenTheSentinelsAnnounceTheNewMaster kills the master under
// load (three sentinels, down-after-milliseconds 1000) and logs how long
// after the first +switch-master announcement the store's first command
// succeeded on the new master: the store must follow the announcement, not
// a reconnection timer. docs/redis.md, "A lease must outlive a failover".
func TestReconnectsWhenTheSentinelsAnnounceTheNewMaster(t *testing.T) {
	sn := redistest.StartSentinel(t, redistest.WithSentinels(3))
	s := newStore(t, Options{Addrs: sn.SentinelAddrs(), MasterName: sn.MasterName()})
	switches := sn.WatchSwitches(t)
	ctx := context.Background()
	if _, err := s.Begin(ctx, "warm-up", store.Lease{}, time.Minute); err != nil {
		t.Fatalf("Begin before the failover: %v", err)
	}

	// Callers keep taking leases on fresh keys; each success is noted with
	// when it returned.
	type success struct {
		key string
		at  time.Time
	}
	var (
		mu        sync.Mutex
		successes []success
		failures  atomic.Int64
		stop      = make(chan struct{})
		wg        sync.WaitGroup
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20000; i++ {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond): // the load's pace
				}
				key := fmt.Sprintf("reconnect-%d-%d", w, i)
				if _, err := s.Begin(ctx, key, store.Lease{}, time.Minute); err != nil {
					failures.Add(1)
					continue
				}
				mu.Lock()
				successes = append(successes, success{key, time.Now()})
				mu.Unlock()
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	killed := time.Now()
	sn.Master.Kill()
	var sw redistest.Switch
	select {
	case sw = <-switches:
	case <-time.After(30 * time.Second):
		t.Fatal("no +switch-master announced within 30 s of the master's death")
	}
	if sw.Addr != sn.Replica.Addr() {
		t.Fatalf("+switch-master to %s, want the replica %s", sw.Addr, sn.Replica.Addr())
	}
	newMaster := sn.Replica.Client(t)

	// The first lease taken after the announcement, found on the new master.
	var first success
	testbin.SucceedsSoon(t, 20*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, sc := range successes {
			if sc.at.Before(sw.At) {
				continue
			}
			n, err := newMaster.Exists(ctx, s.redisKey(sc.key)).Result()
			if err != nil || n != 1 {
				return fmt.Errorf("lease %s taken after the switch is not on the new master: %d, %v", sc.key, n, err)
			}
			first = sc
			return nil
		}
		return fmt.Errorf("no lease taken since the switch (%d failures)", failures.Load())
	})
	t.Logf("master killed; +switch-master %v later; first command on the new master %v after the announcement (%d commands failed meanwhile)",
		sw.At.Sub(killed).Round(time.Millisecond), first.at.Sub(sw.At).Round(time.Millisecond), failures.Load())
}
