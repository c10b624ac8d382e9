package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/faultnet"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// The master-killed runs: a Sentinel deployment (master, one replica, three
// sentinels, down-after-milliseconds 1000) whose replica replicates over a
// link 100 ms slow, as across zones; two proxies; killClients clients, each
// sending keys of its own and retrying each until it replays. The master is
// SIGKILLed under that load and its link to the replica reset with it, so
// that what the replica had not received yet is lost, as with a master
// that dies before its replica has its last writes.
const (
	killClients   = 24
	killReplLag   = 100 * time.Millisecond
	killLockTTL   = "12s" // outlives the failover, the replica's return included
	killKeysAfter = 100   // keys replayed since the switch before the load stops
)

// TestMasterKilledWithReplicaAckExecutesNoKeyTwice: with replica_ack: 1
// and a lock_ttl that outlives the failover, no key executes twice,
// counted on the upstream's own log, although the replica had not received
// the master's last writes. The old master is restarted once the sentinels
// announce the new one, and rejoins as its replica: until then no replica
// can acknowledge, and new keys are refused. docs/guarantees.md, "With
// replica_ack, a lease and a record are on a replica before they count".
func TestMasterKilledWithReplicaAckExecutesNoKeyTwice(t *testing.T) {
	run := killMasterUnderLoad(t, 1)
	run.log(t)
	if run.twice != 0 {
		t.Errorf("replica_ack: 1: %d of %d keys executed twice, want none", run.twice, run.keys)
	}
}

// TestMasterKilledWithoutReplicaAck measures the window replica_ack: 0
// leaves: how many keys executed twice when the master died before its
// replica had its last writes (docs/redis.md, "Waiting for replicas"). It
// asserts only that every key ends replayed.
func TestMasterKilledWithoutReplicaAck(t *testing.T) {
	run := killMasterUnderLoad(t, 0)
	run.log(t)
}

// killRun is what one master-killed run measured.
type killRun struct {
	replicaAck   int
	keys, twice  int
	killToSwitch time.Duration
	// firstOK is, per proxy, when it first answered a 2xx after the
	// announcement; firstExec when the upstream next executed a key.
	firstOK   map[string]time.Duration
	firstExec time.Duration
}

func (r killRun) log(t *testing.T) {
	t.Logf("replica_ack %d: %d of %d keys executed twice; +switch-master %v after the kill; "+
		"first 2xx after the announcement %v; first execution %v after it",
		r.replicaAck, r.twice, r.keys, r.killToSwitch.Round(time.Millisecond), r.firstOK, r.firstExec.Round(time.Millisecond))
}

// killAttempt is one request of the load: which proxy answered what, when.
type killAttempt struct {
	base string
	at   time.Time
	r    reply
}

func killMasterUnderLoad(t *testing.T, replicaAck int) killRun {
	var link *faultnet.Proxy
	sn := redistest.StartSentinel(t, redistest.WithSentinels(3),
		redistest.WithReplicationVia(func(master string) string {
			link = faultnet.Start(t, master)
			link.SetLatency(killReplLag)
			return link.Addr()
		}))
	up := startUpstream(t)
	cfg := baseConfig(up, "")
	cfg.RedisAddrs, cfg.MasterName = sn.SentinelAddrs(), sn.MasterName()
	// A wait covers a round trip over the slow link.
	cfg.RedisTimeout, cfg.ReplicaAck, cfg.ReplicaAckTimeout = 2*time.Second, replicaAck, time.Second
	cfg = withPolicy(cfg, "lock_ttl", killLockTTL)
	ps := startReplicas(t, 2, cfg)
	if got := metricSum(t, "idempotency_proxy_lock_ttl_unsafe", nil, ps...); got != 0 {
		t.Fatalf("lock_ttl_unsafe = %v with lock_ttl %s, want 0: the run needs a lease that outlives the failover", got, killLockTTL)
	}
	switches := sn.WatchSwitches(t)

	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var (
		mu          sync.Mutex
		attempts    []killAttempt
		keys        = map[string][]reply{}
		switchedAt  atomic.Int64 // UnixNano of the announcement; 0 before
		afterSwitch atomic.Int64 // keys first sent after it, replayed
		stop        = make(chan struct{})
		wg          sync.WaitGroup
	)
	c := newClient(t, 10*time.Second)
	for w := range killClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := testRand(uint64(w))
			for i := 0; i < 400; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("kill-%02d-%04d", w, i)
				started := time.Now().UnixNano()
				backoff := 20 * time.Millisecond
				// Retry the key until it replays: only then is it settled.
				for n := 0; n < 400 && ctx.Err() == nil; n++ {
					base := ps[(w+n)%len(ps)].URL()
					r := send(ctx, c, base, request{Key: key, Body: key, Header: map[string]string{hdrSleep: "20ms"}})
					mu.Lock()
					attempts = append(attempts, killAttempt{base, time.Now(), r})
					keys[key] = append(keys[key], r)
					mu.Unlock()
					if r.Err == nil && r.Status/100 == 2 && r.Replayed() {
						if sw := switchedAt.Load(); sw != 0 && started > sw {
							afterSwitch.Add(1)
						}
						break
					}
					if r.Err == nil && r.Status/100 == 2 {
						continue // executed: ask again for the replay
					}
					if !retryable(r) {
						break
					}
					wait := backoff + time.Duration(rnd.Int64N(int64(backoff)))
					backoff = min(2*backoff, 200*time.Millisecond)
					select { // a client's backoff between retries
					case <-time.After(wait):
					case <-ctx.Done():
					}
				}
			}
		}()
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopLoad()

	wait.SucceedsSoon(t, 20*time.Second, func() error {
		if n := up.Total(); n < 200 {
			return fmt.Errorf("%d executions before the kill, want 200", n)
		}
		return nil
	})
	killed := time.Now()
	sn.Master.Kill()
	link.Refuse(true)
	link.ResetAll() // what was on its way to the replica is lost
	var sw redistest.Switch
	select {
	case sw = <-switches:
	case <-time.After(30 * time.Second):
		t.Fatal("no +switch-master within 30 s of the kill")
	}
	switchedAt.Store(sw.At.UnixNano())
	if replicaAck > 0 {
		// The old master comes back empty and follows the new one, as the
		// sentinels would make it do within their INFO period (up to
		// 10 s): a replica can acknowledge again.
		sn.Master.Restart()
		// A full sync at once, not after Redis' 5 s wait for more replicas.
		if err := sn.Replica.Client(t).ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
			t.Fatalf("CONFIG SET on the new master: %v", err)
		}
		host, port, _ := net.SplitHostPort(sw.Addr)
		if err := sn.Master.Client(t).ReplicaOf(ctx, host, port).Err(); err != nil {
			t.Fatalf("REPLICAOF %s on the old master: %v", sw.Addr, err)
		}
	}
	wait.SucceedsSoon(t, 30*time.Second, func() error {
		if n := afterSwitch.Load(); n < killKeysAfter {
			return fmt.Errorf("%d keys sent since the switch replayed, want %d", n, killKeysAfter)
		}
		return nil
	})
	stopLoad()

	run := killRun{replicaAck: replicaAck, keys: len(keys), killToSwitch: sw.At.Sub(killed), firstOK: map[string]time.Duration{}}
	for key, rs := range keys {
		ex := up.Execs(key)
		if len(ex) > 1 {
			run.twice++
		}
		last := rs[len(rs)-1]
		if last.Err != nil || last.Status/100 != 2 || !last.Replayed() {
			t.Errorf("key %s: last of %d replies %s, want a replay", key, len(rs), last)
			continue
		}
		if !bodyOf(ex, last.Body) {
			t.Errorf("key %s: replayed %q, which none of its %d executions answered", key, last.Body, len(ex))
		}
	}
	for _, a := range attempts {
		name := "proxy " + strconv.Itoa(indexOf(ps, a.base))
		if _, ok := run.firstOK[name]; !ok && a.at.After(sw.At) && a.r.Err == nil && a.r.Status/100 == 2 {
			run.firstOK[name] = a.at.Sub(sw.At).Round(time.Millisecond)
		}
	}
	for _, ex := range up.AllExecs() {
		for _, e := range ex {
			if d := e.At.Sub(sw.At); d > 0 && (run.firstExec == 0 || d < run.firstExec) {
				run.firstExec = d
			}
		}
	}
	// With replica_ack every acknowledged write was on the replica: no
	// loss. Without, the writes on their way to it were lost, the
	// proxies' marks among them when one had just advanced: a loss may
	// rightly be reported.
	if got := metricSum(t, mDataLoss, nil, ps...); replicaAck > 0 && got != 0 {
		t.Errorf("%s = %v after a failover that kept every acknowledged write, want 0", mDataLoss, got)
	}
	waitStatus(t, ps[0].AdminURL()+"/readyz", http.StatusOK, 10*time.Second)
	return run
}

func indexOf(ps []*proxyProc, base string) int {
	for i, p := range ps {
		if p.URL() == base {
			return i
		}
	}
	return -1
}
