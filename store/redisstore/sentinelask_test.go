package redisstore

import (
	"context"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2/server"
)

// The store remembers each of its last few masters (up to keptMasters)
// however often it asked the sentinels meanwhile, who keep naming the
// current one (a waiting dial asks every reresolve): hearing a master named
// again does not push the former ones out.
func TestSentinelAskedAgainRemembersEveryRecentMaster(t *testing.T) {
	masters := []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.1:6379", "10.0.0.3:6379"}
	var named atomic.Value
	addr := fakeSentinel(t, func(c *server.Peer) { nameMaster(c, named.Load().(string)) })
	sn := newSentinel(Options{Addrs: []string{addr}, MasterName: "mymaster", Timeout: 5 * time.Second})
	t.Cleanup(sn.close)
	ctx := context.Background()

	// The master moves from the first to the second, back, and on to a
	// third; each master is asked for again and again.
	for _, m := range masters {
		named.Store(m)
		for range 2 * keptMasters {
			if got, err := sn.masterAddr(ctx); err != nil || got != m {
				t.Fatalf("masterAddr = %q, %v; want %s", got, err, m)
			}
		}
	}
	for _, m := range masters {
		if !sn.wasMaster(ctx, m) {
			t.Errorf("wasMaster(%s) = false: masters %q miss one of the last three", m, knownMasters(sn))
		}
	}
}

// A question for the master that a sentinel cannot answer fails with that
// sentinel's own reason: a refused connection, or a reply that is not a
// host and a port.
func TestMasterAddrNamesEachSentinelsReason(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sentinel func(t *testing.T) string
		want     string
	}{
		{"refused", deadAddr, "connection refused"},
		{"a reply of one field", func(t *testing.T) string {
			return fakeSentinel(t, func(c *server.Peer) { c.WriteStrings([]string{"127.0.0.1"}) })
		}, `reply ["127.0.0.1"]`},
		{"a reply of three fields", func(t *testing.T) string {
			return fakeSentinel(t, func(c *server.Peer) { c.WriteStrings([]string{"127.0.0.1", "6379", "x"}) })
		}, `reply ["127.0.0.1" "6379" "x"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := tc.sentinel(t)
			sn := newSentinel(Options{Addrs: []string{addr}, MasterName: "mymaster", Timeout: 5 * time.Second})
			t.Cleanup(sn.close)
			got, err := sn.masterAddr(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), addr) {
				t.Errorf("masterAddr = %q, %v; want an error naming %s and %s", got, err, addr, tc.want)
			}
		})
	}
}

// A sentinel is asked each question once: one that drops the connection
// fails that question with its cause, without a second attempt after a
// backoff (the other sentinels answer for it), and the next question asks
// it again.
func TestSentinelThatDropsAQuestionFailsItAndIsAskedAgainByTheNext(t *testing.T) {
	master := "10.0.0.1:6379"
	var asked atomic.Int64
	addr := fakeSentinel(t, func(c *server.Peer) {
		if asked.Add(1) == 1 {
			c.Close() // no reply: the connection ends
			return
		}
		nameMaster(c, master)
	})
	sn := newSentinel(Options{Addrs: []string{addr}, MasterName: "mymaster", Timeout: 5 * time.Second})
	t.Cleanup(sn.close)
	ctx := context.Background()
	if got, err := sn.masterAddr(ctx); err == nil || !strings.Contains(err.Error(), io.EOF.Error()) {
		t.Errorf("masterAddr from a sentinel that dropped the question = %q, %v; want its cause, EOF", got, err)
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("the sentinel was asked %d times in one question, want once", n)
	}
	if got, err := sn.masterAddr(ctx); err != nil || got != master {
		t.Errorf("the next question = %q, %v; want %s", got, err, master)
	}
}
