package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

func forgot(t *testing.T, s *Store) []string {
	t.Helper()
	h, err := s.Health(context.Background())
	if err != nil {
		t.Fatalf("Health: %v", err)
	}
	return h.Forgot
}

// TestForgottenDataIsNoticed: a FLUSHALL and a restart without persistence
// are each reported once by every store that saw the data before — the one
// that re-arms the marker and the one that finds it re-armed — and neither a
// second store on the same Redis (a proxy restart) nor a quiet check is.
func TestForgottenDataIsNoticed(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
	a := newStore(t, Options{URL: srv.URL()})
	ctx := context.Background()
	if got := forgot(t, a); len(got) != 0 {
		t.Fatalf("first check of a new Redis: %q, want nothing forgotten", got)
	}
	b := newStore(t, Options{URL: srv.URL()}) // a proxy started later
	if got := forgot(t, b); len(got) != 0 {
		t.Fatalf("a second store on a Redis that forgot nothing: %q", got)
	}
	if got := forgot(t, a); len(got) != 0 {
		t.Fatalf("a quiet second check: %q", got)
	}

	if err := srv.Client(t).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if got := forgot(t, a); len(got) != 1 || !strings.Contains(got[0], "is gone") {
		t.Fatalf("after FLUSHALL: %q, want one loss, the marker gone", got)
	}
	if got := forgot(t, b); len(got) != 1 || !strings.Contains(got[0], "set anew") {
		t.Fatalf("the other store after FLUSHALL: %q, want one loss, the marker set anew", got)
	}
	if got := forgot(t, a); len(got) != 0 {
		t.Fatalf("a loss is reported once: %q", got)
	}

	srv.Restart() // --save "": nothing survives
	if got := forgot(t, a); len(got) != 1 {
		t.Fatalf("after a restart without persistence: %q, want one loss", got)
	}
}

// TestExpiringKeysAreNotALoss: records that expire, and keys an operator
// deletes through the key API, leave the marker alone.
func TestExpiringKeysAreNotALoss(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
	s := newStore(t, Options{URL: srv.URL()})
	ctx := context.Background()
	forgot(t, s)
	res, err := s.Begin(ctx, "k1", store.Lease{Fingerprint: store.Fingerprint{1}}, 50*time.Millisecond)
	if err != nil || res.State != store.Acquired {
		t.Fatalf("Begin = %+v, %v", res, err)
	}
	if err := s.Delete(ctx, "k1"); err != nil {
		t.Fatal(err)
	}
	if got := forgot(t, s); len(got) != 0 {
		t.Fatalf("after a delete: %q", got)
	}
	entries, _, err := s.List(ctx, 0, "", 100)
	if err != nil || len(entries) != 0 {
		t.Fatalf("List = %v, %v; the marker is not a key the operator sees", entries, err)
	}
}

// TestEveryClusterMasterHasAMarker: each master holds a marker, and a master
// that forgets is named.
func TestEveryClusterMasterHasAMarker(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s := newStore(t, Options{Addrs: cl.Addrs()})
	ctx := context.Background()
	if got := forgot(t, s); len(got) != 0 {
		t.Fatalf("first check: %q", got)
	}
	for _, n := range cl.Nodes {
		if size, err := n.Client(t).DBSize(ctx).Result(); err != nil || size != 2 {
			t.Errorf("master %s holds %d keys (%v), want its epoch and this store's mark", n.Addr(), size, err)
		}
	}
	// The markers' slots are worked out here: they must be Redis's.
	for _, tag := range []string{"0", "1", "17", "123456", "epoch"} {
		want, err := cl.Nodes[0].Client(t).ClusterKeySlot(ctx, "x{"+tag+"}").Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := keySlot(tag); int64(got) != want {
			t.Errorf("keySlot(%q) = %d, CLUSTER KEYSLOT says %d", tag, got, want)
		}
	}
	victim := cl.Nodes[1]
	if err := victim.Client(t).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	got := forgot(t, s)
	if len(got) != 1 || !strings.Contains(got[0], victim.Addr()) {
		t.Fatalf("after one master's FLUSHALL: %q, want one loss naming %s", got, victim.Addr())
	}
}

// TestSentinelFailoverTimeIsReported reads down-after-milliseconds (1000 in
// redistest's sentinel) and adds the election and reconnection margin.
func TestSentinelFailoverTimeIsReported(t *testing.T) {
	sn := redistest.StartSentinel(t)
	s := newStore(t, Options{Addrs: sn.SentinelAddrs(), MasterName: sn.MasterName()})
	h, err := s.Health(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Second + FailoverMargin; h.FailoverTime != want {
		t.Errorf("FailoverTime = %v, want %v", h.FailoverTime, want)
	}
}

// TestOlderCopyOfRedisIsNoticed: Redis restarted from a snapshot older than
// a store's last check is reported once by that store (its mark is behind)
// and once by a store that last checked before the snapshot (the epoch was
// set anew). A snapshot taken after every store's last check holds all they
// knew of, and is not a loss (docs/redis.md, "When Redis forgets").
func TestOlderCopyOfRedisIsNoticed(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction", "--save", "3600 1")
	a := newStore(t, Options{URL: srv.URL()})
	b := newStore(t, Options{URL: srv.URL()})
	ctx := context.Background()
	forgot(t, a)
	forgot(t, b)
	save := func() {
		t.Helper()
		if err := srv.Client(t).Save(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}

	save()
	if got := forgot(t, a); len(got) != 0 { // a checks after the snapshot
		t.Fatalf("a quiet check: %q", got)
	}
	srv.Restart() // SIGKILL: back to the snapshot
	if got := forgot(t, a); len(got) != 1 || !strings.Contains(got[0], "older copy") {
		t.Fatalf("after a restart from an older snapshot: %q, want one loss naming the older copy", got)
	}
	if got := forgot(t, b); len(got) != 1 || !strings.Contains(got[0], "set anew") {
		t.Fatalf("the store that last checked before the snapshot: %q, want one loss, the marker set anew", got)
	}
	for _, s := range []*Store{a, b} {
		if got := forgot(t, s); len(got) != 0 {
			t.Fatalf("a loss is reported once: %q", got)
		}
	}

	save() // after both stores' last checks
	srv.Restart()
	for _, s := range []*Store{a, b} {
		if got := forgot(t, s); len(got) != 0 {
			t.Fatalf("after a restart from a snapshot newer than every check: %q", got)
		}
	}
}

// TestFullRedisStillNoticesALoss: a Redis out of memory refuses the
// markers' advance; a check then only reads them, and still notices an
// older copy, once.
func TestFullRedisStillNoticesALoss(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction", "--save", "3600 1")
	s := newStore(t, Options{URL: srv.URL()})
	ctx := context.Background()
	forgot(t, s)
	rc := srv.Client(t)
	if err := rc.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	forgot(t, s)
	srv.Restart()
	if err := rc.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if got := forgot(t, s); len(got) != 1 || !strings.Contains(got[0], "older copy") {
		t.Fatalf("a full Redis restarted from an older snapshot: %q, want one loss naming the older copy", got)
	}
	if got := forgot(t, s); len(got) != 0 {
		t.Fatalf("a loss is reported once: %q", got)
	}
}

// TestUnacknowledgedMarkAdvanceIsNotALoss: with replica_ack, a mark's
// advance no replica acknowledged counts for nothing, so a failover that
// loses it (here: the master's copy set back, as a promoted replica would
// hold it) is not reported, while one that loses an acknowledged advance
// is.
func TestUnacknowledgedMarkAdvanceIsNotALoss(t *testing.T) {
	s, master, replica := patientlyReplicated(t)
	ctx := context.Background()
	forgot(t, s)
	forgot(t, s) // acknowledged: the replica holds the mark
	mark := s.markKey(s.markerKey("0"))
	held, err := replica.Client(t).Get(ctx, mark).Result()
	if err != nil {
		t.Fatalf("the replica's copy of the mark: %v", err)
	}

	replica.Pause()
	if got := forgot(t, s); len(got) != 0 { // advances, unacknowledged
		replica.Resume()
		t.Fatalf("a check with the replica paused: %q", got)
	}
	mc := master.Client(t)
	if err := mc.Set(ctx, mark, held, markTTL).Err(); err != nil {
		t.Fatal(err)
	}
	replica.Resume()
	if got := forgot(t, s); len(got) != 0 {
		t.Fatalf("after losing an unacknowledged advance: %q, want no loss", got)
	}

	if err := mc.Set(ctx, mark, held, markTTL).Err(); err != nil { // behind the acknowledged one now
		t.Fatal(err)
	}
	if got := forgot(t, s); len(got) != 1 || !strings.Contains(got[0], "older copy") {
		t.Fatalf("after losing an acknowledged advance: %q, want one loss naming the older copy", got)
	}
}
