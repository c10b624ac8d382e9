package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/storetest"
)

func TestConformanceCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	// A generous timeout: the suite checks semantics, and the machine
	// running it may be busy.
	s := newStore(t, Options{Addrs: cl.Addrs(), Timeout: 2 * time.Second})
	storetest.Run(t, func(*testing.T) storetest.Harness { return storetest.Harness{Store: s} })
	// The suite's ManyKeys case must have reached every master.
	for _, n := range cl.Nodes {
		if got := n.CountKeys(t, DefaultKeyPrefix+"{*}"); got == 0 {
			t.Errorf("node %s holds none of the store's keys, want some", n.Addr())
		}
	}
}

// TestSentinelFailover runs the suite through Sentinel, forces a failover,
// and checks that the same Store keeps working against the new master.
// Between the promotion and the client switching over, operations fail with
// ErrUnavailable (READONLY from the demoted master, or connection errors):
// about a second here, the sentinel's reconfiguration time in production.
//
// Nothing here rests on a guess of how fast the machine is: operations get
// a timeout far above what they take, the suite's expiring leases outlast
// two of them, the replica is waited for until it has the record, and the
// switch-over until the store answers.
func TestSentinelFailover(t *testing.T) {
	sn := redistest.StartSentinel(t)
	const timeout = time.Second
	s := newStore(t, Options{Addrs: sn.SentinelAddrs(), MasterName: sn.MasterName(), Timeout: timeout})
	storetest.Run(t, func(*testing.T) storetest.Harness { return storetest.Harness{Store: s, Lease: 2 * timeout} })

	ctx := context.Background()
	b, err := s.Begin(ctx, "before", store.Lease{Fingerprint: store.Fingerprint{1}}, time.Minute)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	rec := &store.Record{Status: 201, Body: []byte("kept"), Fingerprint: store.Fingerprint{1}}
	if err := s.Complete(ctx, "before", b.Token, rec, time.Hour); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	// Replication is asynchronous: wait until the replica has the record so
	// that the test checks the store, not replication lag.
	master := sn.Master.Client(t)
	wait.SucceedsSoon(t, 30*time.Second, func() error {
		if n, err := master.Do(ctx, "WAIT", 1, 1000).Int(); err != nil || n != 1 {
			return fmt.Errorf("WAIT 1 = %d, %v: the replica does not have the record", n, err)
		}
		return nil
	})

	newMaster := sn.Failover(t)
	start := time.Now()
	wait.SucceedsSoon(t, 30*time.Second, func() error {
		_, err := s.Begin(ctx, "after", store.Lease{Fingerprint: store.Fingerprint{2}}, time.Minute)
		if err != nil && !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("Begin during failover = %v, want ErrUnavailable", err)
		}
		if err != nil {
			return fmt.Errorf("store still failing after failover to %s: %w", newMaster, err)
		}
		return nil
	})
	t.Logf("unavailable for %v after failover to %s", time.Since(start).Round(time.Millisecond), newMaster)
	got, err := s.Inspect(ctx, "before")
	if err != nil || got.Record == nil || string(got.Record.Body) != "kept" {
		t.Fatalf("Inspect after failover = %+v, %v; want the record from before", got, err)
	}
}

// TestListCrossesEveryClusterMaster pages through a Cluster's keys and
// checks that the cursors walk every master, and that every key comes back
// (once per page; SCAN may repeat a key on a later page while a master
// resizes its table).
func TestListCrossesEveryClusterMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s := newStore(t, Options{Addrs: cl.Addrs()})
	ctx := context.Background()
	want := map[string]bool{}
	for i := range 50 {
		key := fmt.Sprint("list-", i)
		if _, err := s.Begin(ctx, key, store.Lease{}, time.Minute); err != nil {
			t.Fatalf("Begin %s: %v", key, err)
		}
		want[key] = true
	}
	masters := map[string]bool{}
	seen := map[string]bool{}
	cursor := ""
	for range 1000 {
		page, next, err := s.List(ctx, store.InFlight, cursor, 4)
		if err != nil {
			t.Fatalf("List(%q): %v", cursor, err)
		}
		inPage := map[string]bool{}
		for _, e := range page {
			if inPage[e.Key] {
				t.Errorf("List gave %s twice in one page", e.Key)
			}
			inPage[e.Key], seen[e.Key] = true, true
		}
		if next == "" {
			break
		}
		pos, err := parseCursor(next)
		if err != nil {
			t.Fatalf("List returned cursor %q: %v", next, err)
		}
		masters[pos.addr] = true
		cursor = next
	}
	if len(masters) != 3 {
		t.Errorf("cursors named masters %v, want all 3", masters)
	}
	for k := range want {
		if !seen[k] {
			t.Errorf("List missed %s", k)
		}
	}
}
