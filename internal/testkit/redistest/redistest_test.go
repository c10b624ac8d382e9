package redistest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStartKillRestart(t *testing.T) {
	srv := Start(t)
	ctx := context.Background()
	c := srv.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	pid := srv.PID()
	srv.Kill()
	if got := srv.PID(); got != 0 {
		t.Fatalf("PID after Kill = %d, want 0", got)
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING after Kill succeeded")
	}
	srv.Restart()
	if got := srv.PID(); got == 0 || got == pid {
		t.Fatalf("PID after Restart = %d, want a new non-zero pid (old %d)", got, pid)
	}
	// Persistence is off: the restarted server is empty.
	if got, err := c.Exists(ctx, "k").Result(); err != nil || got != 0 {
		t.Fatalf("EXISTS k after restart = %d, %v; want 0, nil", got, err)
	}
}

func TestStartCluster(t *testing.T) {
	cl := StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	for i := range 50 {
		if err := c.Set(ctx, fmt.Sprint("k", i), i, time.Minute).Err(); err != nil {
			t.Fatalf("SET k%d: %v", i, err)
		}
	}
	for _, n := range cl.Nodes {
		got, err := n.Client(t).DBSize(ctx).Result()
		if err != nil || got == 0 {
			t.Errorf("node %s DBSIZE = %d, %v; want > 0", n.Addr(), got, err)
		}
	}
}

func TestStartSentinelFailover(t *testing.T) {
	s := StartSentinel(t)
	old := s.MasterAddr(t)
	if old != s.Master.Addr() {
		t.Fatalf("master = %s, want %s", old, s.Master.Addr())
	}
	if got, want := s.Failover(t), s.Replica.Addr(); got != want {
		t.Fatalf("new master = %s, want %s", got, want)
	}
}
