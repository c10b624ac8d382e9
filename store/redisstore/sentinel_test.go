package redisstore

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
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
	wait.SucceedsSoon(t, 10*time.Second, func() error {
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
	wait.SucceedsSoon(t, 10*time.Second, func() error {
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

// blackhole is the address of a loopback listener that accepts every
// connection and never answers: a sentinel whose process hangs.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// Two sentinels that accept connections and never answer, listed ahead of
// a live one, cost the store one timeout in all, not one each: New returns
// at once, the first Ping succeeds, Health reports the failover time the
// live sentinel gives, and the store names the master, all well within
// twice its timeout. Before, New subscribed to one sentinel after another
// (a timeout each), go-redis's search for the master waited out the dead
// sentinels' reads (the first Ping failed), the first dead sentinel used
// up Health's deadline (the failover time read 0, and a lock_ttl too short
// went unwarned), and naming the master took a timeout per dead sentinel.
func TestSentinelThatNeverAnswersDelaysTheStoreOneTimeoutInAll(t *testing.T) {
	sn := redistest.StartSentinel(t)
	const timeout = 3 * time.Second
	addrs := append([]string{blackhole(t), blackhole(t)}, sn.SentinelAddrs()...)
	master := sn.MasterAddr(t)
	ctx := context.Background()

	start := time.Now()
	s := newStore(t, Options{Addrs: addrs, MasterName: sn.MasterName(), Timeout: timeout})
	if elapsed := time.Since(start); elapsed >= timeout {
		t.Errorf("New took %v with %d dead sentinels; it contacts none of them itself", elapsed.Round(time.Millisecond), len(addrs)-1)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	h, err := s.Health(ctx)
	if err != nil {
		t.Fatalf("Health: %v", err)
	}
	if want := time.Second + FailoverMargin; h.FailoverTime != want {
		t.Errorf("FailoverTime = %v, want %v from the live sentinel", h.FailoverTime, want)
	}
	if got, err := s.sentinel.masterAddr(ctx); err != nil || got != master {
		t.Errorf("masterAddr = %q, %v; want %s from the live sentinel", got, err, master)
	}
	if elapsed := time.Since(start); elapsed >= 2*timeout {
		t.Errorf("starting, Health and naming the master took %v with %d dead sentinels; want under %v (one timeout of %v in all)",
			elapsed.Round(time.Millisecond), len(addrs)-1, 2*timeout, timeout)
	}
}

// When no sentinel answers, asking them gives up at the store's timeout,
// not one timeout per sentinel, with every sentinel's reason, each named
// by its address.
func TestSentinelsThatNeverAnswerAreEachNamed(t *testing.T) {
	addrs := []string{blackhole(t), blackhole(t), blackhole(t), blackhole(t)}
	const timeout = 500 * time.Millisecond
	sn := newSentinel(Options{Addrs: addrs, MasterName: "mymaster", Timeout: timeout})
	t.Cleanup(sn.close)
	start := time.Now()
	_, err := sn.masterAddr(context.Background())
	elapsed := time.Since(start)
	if err == nil {
		t.Fatal("masterAddr named a master no sentinel gave")
	}
	for _, addr := range addrs {
		if !strings.Contains(err.Error(), addr) {
			t.Errorf("error %q does not name sentinel %s", err, addr)
		}
	}
	if elapsed >= 3*timeout {
		t.Errorf("gave up after %v with %d sentinels, want about one timeout (%v), not one each", elapsed.Round(time.Millisecond), len(addrs), timeout)
	}
}

// A sentinel the store was not configured with, but that go-redis learns
// of from the others (SENTINEL SENTINELS names them by IP, where the store
// may name them by host), and that accepts connections and never answers,
// costs the store no more than a configured one: once the sentinel the
// client follows dies, a search for the master that asks the discovered
// one too ends as soon as a live sentinel answers.
func TestDiscoveredSentinelThatNeverAnswersDelaysNothing(t *testing.T) {
	sn := redistest.StartSentinel(t, redistest.WithSentinels(2))
	const timeout = 3 * time.Second
	hung := blackhole(t)
	ctx := context.Background()

	// A sentinel hears of others through hello messages on the master.
	host, port, _ := net.SplitHostPort(hung)
	_, mport, _ := net.SplitHostPort(sn.MasterAddr(t))
	master := sn.Master.Client(t)
	first := redis.NewSentinelClient(&redis.Options{Addr: sn.Sentinels[0].Addr()})
	t.Cleanup(func() { first.Close() })
	wait.SucceedsSoon(t, 20*time.Second, func() error {
		hello := fmt.Sprintf("%s,%s,%s,0,%s,127.0.0.1,%s,0", host, port, strings.Repeat("f", 40), sn.MasterName(), mport)
		master.Publish(ctx, "__sentinel__:hello", hello)
		others, err := first.Sentinels(ctx, sn.MasterName()).Result()
		for _, o := range others {
			if net.JoinHostPort(o["ip"], o["port"]) == hung {
				return nil
			}
		}
		return fmt.Errorf("sentinel %s names %v, %v; not yet %s", sn.Sentinels[0].Addr(), others, err, hung)
	})

	s := newStore(t, Options{Addrs: []string{sn.Sentinels[0].Addr()}, MasterName: sn.MasterName(), Timeout: timeout})
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	sn.Sentinels[0].Kill()
	// A new connection to the master makes go-redis look for it again.
	if err := master.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatalf("CLIENT KILL: %v", err)
	}
	start := time.Now()
	err := s.Ping(ctx)
	if elapsed := time.Since(start); err != nil || elapsed >= timeout {
		t.Errorf("Ping after the followed sentinel died = %v after %v; want success well within the timeout (%v), from the live sentinel",
			err, elapsed.Round(time.Millisecond), timeout)
	}
}

// A dial that waits for PING's answer works with a server that wants a
// password (its -NOAUTH is an answer) and leaves nothing of the answer
// unread: the client's own AUTH and commands follow on the connection.
func TestDialAfterPingWorksWithAPassword(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "secret")
	sn := newSentinel(Options{Addrs: []string{"127.0.0.1:1"}, MasterName: "mymaster", Timeout: time.Second})
	t.Cleanup(sn.close)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "secret", Dialer: sn.dialSentinel, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through a dial that waited for PING: %v", err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Errorf("GET = %q, %v; want v", got, err)
	}
}
