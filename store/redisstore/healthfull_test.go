package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
)

// TestMasterUsingAllItsMaxmemoryIsFull checks when a master's INFO makes
// Health report the store full: under noeviction, from the moment it uses
// as much memory as its maxmemory; never under an evicting policy, nor
// without a maxmemory.
func TestMasterUsingAllItsMaxmemoryIsFull(t *testing.T) {
	for _, c := range []struct {
		policy, used, limit string
		want                bool
	}{
		{"noeviction", "1000", "1000", true},
		{"noeviction", "1001", "1000", true},
		{"noeviction", "999", "1000", false},
		{"noeviction", "1000", "0", false},
		{"allkeys-lru", "1000", "1000", false},
	} {
		f := map[string]string{"used_memory": c.used, "maxmemory": c.limit}
		if got := full(c.policy, f); got != c.want {
			t.Errorf("%s, used_memory %s of maxmemory %s: full = %v, want %v", c.policy, c.used, c.limit, got, c.want)
		}
	}
}

// TestNodeErrorsNameTheClusterMaster checks the prefix that names a
// Cluster master in an error about it, and names nothing otherwise.
func TestNodeErrorsNameTheClusterMaster(t *testing.T) {
	if got := at(node{}); got != "" {
		t.Errorf("at(the only master) = %q, want nothing", got)
	}
	if got, want := at(node{addr: "10.0.0.7:7000"}), "10.0.0.7:7000: "; got != want {
		t.Errorf("at(a Cluster master) = %q, want %q", got, want)
	}
}

// TestRefusedWriteShowsTheStoreFullForAWhile checks that Health reports
// the store full for fullWindow after Redis refused a write for lack of
// memory, though the master no longer uses all of its maxmemory, and not
// after.
func TestRefusedWriteShowsTheStoreFullForAWhile(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
	s := newStore(t, Options{URL: srv.URL()})
	for _, c := range []struct {
		ago  time.Duration
		want bool
	}{
		{fullWindow / 2, true},
		{fullWindow + time.Second, false},
	} {
		s.lastFull.Store(time.Now().Add(-c.ago).UnixNano())
		h, err := s.Health(context.Background())
		if err != nil || h.Full != c.want {
			t.Errorf("Health %v after a refused write = %+v, %v; want full %v", c.ago, h, err, c.want)
		}
	}
}
