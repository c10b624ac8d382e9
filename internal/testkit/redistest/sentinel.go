package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

const masterName = "idem-master"

// Sentinel is a master with one replica, watched by one sentinel with a
// quorum of 1 (or by several, WithSentinels) and short timeouts so that
// failovers take about a second.
type Sentinel struct {
	Master, Replica *Server
	// Sentinel is the first of Sentinels.
	Sentinel  *Server
	Sentinels []*Server
}

// SentinelOption tunes StartSentinel.
type SentinelOption func(*sentinelConfig)

type sentinelConfig struct {
	sentinels int
	downAfter time.Duration
	via       func(masterAddr string) string
}

// WithSentinels runs n sentinels with a quorum of a majority of them, as a
// production deployment does (three, quorum 2), instead of one.
func WithSentinels(n int) SentinelOption {
	return func(c *sentinelConfig) { c.sentinels = n }
}

// WithDownAfter sets down-after-milliseconds: how long the master must be
// unreachable before the sentinels fail it over (default 1 s).
func WithDownAfter(d time.Duration) SentinelOption {
	return func(c *sentinelConfig) { c.downAfter = d }
}

// WithReplicationVia has the replica replicate from the address via
// returns for the master's (a fault-injecting proxy in front of it, say)
// rather than from the master directly.
func WithReplicationVia(via func(masterAddr string) string) SentinelOption {
	return func(c *sentinelConfig) { c.via = via }
}

// StartSentinel starts the master, the replica (waiting for its link to be
// up), then the sentinels, and returns once every sentinel knows the replica
// and the other sentinels, so that a failover can be forced, or the master
// killed, right away.
func StartSentinel(t testing.TB, opts ...SentinelOption) *Sentinel {
	t.Helper()
	cfg := sentinelConfig{sentinels: 1, downAfter: time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.sentinels < 1 {
		t.Fatalf("StartSentinel: need at least one sentinel, got %d", cfg.sentinels)
	}
	s := &Sentinel{Master: Start(t)}
	from := s.Master.Addr()
	if cfg.via != nil {
		from = cfg.via(from)
	}
	s.Replica = startReplica(t, from)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	quorum := cfg.sentinels/2 + 1
	body := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d\n"+
		"sentinel down-after-milliseconds %[1]s %[4]d\n"+
		"sentinel failover-timeout %[1]s 5000\n"+
		"sentinel parallel-syncs %[1]s 1\n", masterName, s.Master.Port(), quorum, cfg.downAfter.Milliseconds())
	for range cfg.sentinels {
		// Each sentinel rewrites its own configuration file.
		conf := filepath.Join(t.TempDir(), "sentinel.conf")
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatalf("write sentinel.conf: %v", err)
		}
		s.Sentinels = append(s.Sentinels, startServer(t, []string{conf, "--sentinel"}, nil))
	}
	s.Sentinel = s.Sentinels[0]

	for _, sn := range s.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = sc.Close() })
		poll(ctx, t, "sentinel "+sn.Addr()+" sees the replica", func() (bool, string) {
			reps, err := sc.Replicas(ctx, masterName).Result()
			if err != nil || len(reps) == 0 {
				return false, fmt.Sprint(reps, err)
			}
			flags := reps[0]["flags"]
			return flags == "slave", flags
		})
		// Sentinels find each other through the master's hello channel,
		// every 2 s: a kill before that could not reach a quorum.
		poll(ctx, t, "sentinel "+sn.Addr()+" sees the others", func() (bool, string) {
			others, err := sc.Sentinels(ctx, masterName).Result()
			return err == nil && len(others) == cfg.sentinels-1, fmt.Sprint(len(others), " others ", err)
		})
	}
	return s
}

// MasterName is the name the sentinels monitor the master under.
func (s *Sentinel) MasterName() string { return masterName }

// SentinelAddrs are the host:port addresses of the sentinels.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		addrs[i] = sn.Addr()
	}
	return addrs
}

// Switch is a +switch-master announcement: the new master's address and
// when the first sentinel announced it.
type Switch struct {
	Addr string
	At   time.Time
}

// WatchSwitches subscribes to +switch-master on every sentinel and returns
// once the subscriptions are active. Each new master is sent once, when the
// first sentinel announces it.
func (s *Sentinel) WatchSwitches(t testing.TB) <-chan Switch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan Switch, 16)
	var mu sync.Mutex
	seen := map[string]bool{}
	for _, sn := range s.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr(), MaxRetries: -1})
		ps := sc.Subscribe(ctx, "+switch-master")
		if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
			t.Fatalf("SUBSCRIBE +switch-master on %s: %v", sn.Addr(), err)
		}
		t.Cleanup(func() { _ = ps.Close(); _ = sc.Close() })
		go func() {
			for msg := range ps.Channel() {
				at := time.Now()
				// "<name> <old-ip> <old-port> <new-ip> <new-port>"
				f := strings.Fields(msg.Payload)
				if len(f) != 5 || f[0] != masterName {
					continue
				}
				addr := net.JoinHostPort(f[3], f[4])
				mu.Lock()
				first := !seen[addr]
				seen[addr] = true
				mu.Unlock()
				if first {
					out <- Switch{Addr: addr, At: at}
				}
			}
		}()
	}
	t.Cleanup(cancel)
	return out
}

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
	return startReplica(t, master.Addr())
}

// startReplica runs a redis-server replicating from addr.
func startReplica(t testing.TB, addr string) *Server {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("replica of %q: %v", addr, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer mc.Close()
	// The master would wait 5 s for more replicas before the first sync.
	if err := mc.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatalf("CONFIG SET repl-diskless-sync-delay on %s: %v", addr, err)
	}
	r := Start(t, "--replicaof", host, port)
	rc := r.Client(t)
	poll(ctx, t, "replica link up", func() (bool, string) {
		info, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up"), fmt.Sprint(err)
	})
	// The master counts the replica for WAIT once the replica has
	// acknowledged the stream, up to a second after the link is up.
	poll(ctx, t, "replica acknowledging writes", func() (bool, string) {
		n, err := mc.Do(ctx, "WAIT", 1, 100).Int()
		return err == nil && n >= 1, fmt.Sprint(n, err)
	})
	// Tests count the commands they cause: these WAITs are not theirs.
	if err := mc.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatalf("CONFIG RESETSTAT on %s: %v", addr, err)
	}
	return r
}

// poll calls check until it reports done, failing the test with the last
// detail when ctx expires.
func poll(ctx context.Context, t testing.TB, what string, check func() (done bool, detail string)) {
	t.Helper()
	err := wait.Eventually(ctx, func() error {
		if done, detail := check(); !done {
			return errors.New(detail)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
