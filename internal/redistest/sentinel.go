package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testbin"
)

const masterName = "idem-master"

// Sentinel is a master with one replica, watched by one sentinel with a
// quorum of 1 and short timeouts so that failovers take about a second.
type Sentinel struct {
	Master, Replica, Sentinel *Server
}

// StartSentinel starts the master, the replica (waiting for its link to be
// up), then the sentinel, and returns once the sentinel knows the replica, so
// that a failover can be forced right away.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	s := &Sentinel{Master: Start(t)}
	s.Replica = StartReplica(t, s.Master)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	body := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 1\n"+
		"sentinel down-after-milliseconds %[1]s 1000\n"+
		"sentinel failover-timeout %[1]s 5000\n"+
		"sentinel parallel-syncs %[1]s 1\n", masterName, s.Master.Port())
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatalf("write sentinel.conf: %v", err)
	}
	s.Sentinel = startServer(t, []string{conf, "--sentinel"}, nil)

	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinel.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = sc.Close() })
	poll(ctx, t, "sentinel sees replica", func() (bool, string) {
		reps, err := sc.Replicas(ctx, masterName).Result()
		if err != nil || len(reps) == 0 {
			return false, fmt.Sprint(reps, err)
		}
		flags := reps[0]["flags"]
		return flags == "slave", flags
	})
	return s
}

// MasterName is the name the sentinel monitors the master under.
func (s *Sentinel) MasterName() string { return masterName }

// SentinelAddrs are the host:port addresses of the sentinels.
func (s *Sentinel) SentinelAddrs() []string { return []string{s.Sentinel.Addr()} }

// MasterAddr asks the sentinel for the current master's address.
func (s *Sentinel) MasterAddr(t testing.TB) string {
	t.Helper()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinel.Addr(), MaxRetries: -1})
	defer sc.Close()
	hp, err := sc.GetMasterAddrByName(context.Background(), masterName).Result()
	if err != nil || len(hp) != 2 {
		t.Fatalf("SENTINEL get-master-addr-by-name: %v %v", hp, err)
	}
	return net.JoinHostPort(hp[0], hp[1])
}

// Failover forces a failover with SENTINEL FAILOVER and waits until the
// sentinel reports a new master that answers ROLE as master. It returns the
// new master's address.
func (s *Sentinel) Failover(t testing.TB) string {
	t.Helper()
	old := s.MasterAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinel.Addr(), MaxRetries: -1})
	defer sc.Close()
	// The sentinel refuses (NOGOODSLAVE, INPROG) until it has fresh INFO on
	// the replica; retry until it accepts.
	poll(ctx, t, "SENTINEL FAILOVER accepted", func() (bool, string) {
		err := sc.Failover(ctx, masterName).Err()
		return err == nil, fmt.Sprint(err)
	})
	var addr string
	poll(ctx, t, "new master elected", func() (bool, string) {
		hp, err := sc.GetMasterAddrByName(ctx, masterName).Result()
		if err != nil || len(hp) != 2 {
			return false, fmt.Sprint(hp, err)
		}
		addr = net.JoinHostPort(hp[0], hp[1])
		if addr == old {
			return false, "still " + old
		}
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		defer c.Close()
		role, err := c.Do(ctx, "ROLE").Slice()
		if err != nil || len(role) == 0 {
			return false, fmt.Sprint(role, err)
		}
		return role[0] == "master", fmt.Sprint(role[0])
	})
	return addr
}

// StartReplica runs a redis-server replicating master (--replicaof) and
// returns once its link to the master is up.
func StartReplica(t testing.TB, master *Server) *Server {
	t.Helper()
	r := Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rc := r.Client(t)
	poll(ctx, t, "replica link up", func() (bool, string) {
		info, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up"), fmt.Sprint(err)
	})
	return r
}

// poll calls check until it reports done, failing the test with the last
// detail when ctx expires.
func poll(ctx context.Context, t testing.TB, what string, check func() (done bool, detail string)) {
	t.Helper()
	err := testbin.Eventually(ctx, func() error {
		if done, detail := check(); !done {
			return errors.New(detail)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
