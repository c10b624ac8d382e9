package redisstore

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testbin"
)

// knownMasters is a copy of the masters s remembers.
func knownMasters(s *sentinel) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.masters)
}

// A proxy that lives through many failovers, its master moving to a new
// address each time, remembers the last few masters, not every address it
// ever saw: the latest, and the one it replaced, are known; the oldest are
// forgotten. The "sentinel" is a Redis that relays what the test publishes
// on +switch-master.
func TestSentinelRemembersOnlyTheLatestMasters(t *testing.T) {
	relay := miniredis.RunT(t)
	sn := newSentinel(Options{Addrs: []string{relay.Addr()}, MasterName: "mymaster", Timeout: time.Second})
	t.Cleanup(sn.close)
	announce := func(i int) string {
		return fmt.Sprintf("mymaster 10.0.%d.%d 6379 10.0.%d.%d 6379", i/250, i%250, (i+1)/250, (i+1)%250)
	}
	// The subscription connects on its own: announce the first failover
	// until it is heard.
	testbin.SucceedsSoon(t, 10*time.Second, func() error {
		if n := relay.Publish("+switch-master", announce(0)); n == 0 {
			return fmt.Errorf("no subscriber to +switch-master yet")
		}
		return nil
	})
	const failovers = 1000
	for i := 1; i < failovers; i++ {
		relay.Publish("+switch-master", announce(i))
	}
	latest, previous := fmt.Sprintf("10.0.%d.%d:6379", failovers/250, failovers%250), fmt.Sprintf("10.0.%d.%d:6379", (failovers-1)/250, (failovers-1)%250)
	testbin.SucceedsSoon(t, 10*time.Second, func() error {
		if m := knownMasters(sn); !slices.Contains(m, latest) {
			return fmt.Errorf("the last announcement is not heard yet: masters %q", m)
		}
		return nil
	})
	m := knownMasters(sn)
	if len(m) > keptMasters {
		t.Errorf("%d masters remembered after %d failovers, want at most %d", len(m), failovers, keptMasters)
	}
	if !slices.Contains(m, previous) {
		t.Errorf("masters %q (the last %d) miss %s, the master the latest replaced", m, len(m), previous)
	}
	if slices.Contains(m, "10.0.0.0:6379") {
		t.Errorf("the first master is still remembered, among %d", len(m))
	}
	if !sn.wasMaster(context.Background(), previous) {
		t.Errorf("wasMaster(%s) = false for the master the latest replaced", previous)
	}
}
