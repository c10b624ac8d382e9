package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
)

// Defaults of the chaos run; CHAOS_SECONDS and CHAOS_SEED override them.
const (
	chaosSeconds = 45
	chaosSeed    = 20260505
)

// faultNames are the faults the chaos run picks from, by index; the first
// is the store's (killed, or stopped for Postgres).
var faultNames = []string{"store down", "upstream killed", "proxy SIGKILLed", "proxy SIGTERMed"}

// chaosStore is the store server of a chaos run: taken down (Kill) and
// brought back (Restart) on the same address and data.
type chaosStore interface {
	Kill()
	Restart()
	PID() int
}

// The chaos run's clients wait chaosTimeout for an answer; one request in
// chaosSlowOneIn takes longer (up to chaosSlowest), so its client gets 504
// and its call goes on detached, within chaosMaxExecution on an idle
// machine. On a loaded one its answer may come later: the proxy then cuts
// the call at max_execution and logs it (chaosLog.cutAtMaxExecution).
const (
	chaosTimeout      = time.Second
	chaosMaxExecution = 4 * time.Second
	chaosSlowOneIn    = 6
	chaosSlowest      = 2500 * time.Millisecond
	chaosToken        = "chaos-admin-token"
)

// TestChaos runs retrying clients against two replicas on one Redis while
// Redis, the upstream and the replicas are killed and restarted at random,
// then checks the invariants of docs/guarantees.md (see chaosLog.check). Some
// requests outlast upstream.timeout, so calls detached from their clients
// meet every fault. A failing run is replayed with the printed CHAOS_SEED.
func TestChaos(t *testing.T) {
	// Append-only with fsync on every write: a killed Redis keeps what it
	// acknowledged, as a production store must.
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	runChaos(t, srv, func(up *upstream) proxyConfig { return baseConfig(up, srv.URL()) })
}

// TestChaosOnPostgres is the same run on two replicas sharing one
// PostgreSQL, which is stopped (fast shutdown) and started again as the
// store fault.
func TestChaosOnPostgres(t *testing.T) {
	pg := pgtest.Start(t)
	runChaos(t, pgChaos{pg}, func(up *upstream) proxyConfig { return postgresConfig(up, pg.URL()) })
}

// TestChaosOnTheFileStore is the same run on one proxy on the file store
// (one process per directory, so no second replica and no store server):
// the proxy, SIGKILLed or SIGTERMed and restarted on its directory, must
// keep every lease and record it acknowledged.
func TestChaosOnTheFileStore(t *testing.T) {
	dir := t.TempDir()
	runChaos(t, nil, func(up *upstream) proxyConfig {
		cfg := fileConfig(up, dir, false)
		cfg.Defaults = baseConfig(up, "").Defaults
		return cfg
	})
}

// pgChaos takes a PostgreSQL server down the way an operator restarting it
// does: a fast shutdown, every committed transaction kept.
type pgChaos struct{ *pgtest.Server }

func (p pgChaos) Kill()    { p.Stop() }
func (p pgChaos) Restart() { p.Start() }

// runChaos runs the chaos on two replicas sharing srv, or on one proxy
// when srv is nil (a store in the proxy's process), without the store fault.
func runChaos(t *testing.T, srv chaosStore, config func(*upstream) proxyConfig) {
	if testing.Short() {
		t.Skip("chaos run skipped in -short mode")
	}
	seconds, seed := envInt(t, "CHAOS_SECONDS", chaosSeconds), envInt(t, "CHAOS_SEED", chaosSeed)
	t.Logf("chaos run: CHAOS_SECONDS=%d CHAOS_SEED=%d", seconds, seed)
	goroutines := runtimeGoroutines()

	up := startUpstream(t)
	cfg := config(up)
	cfg.UpstreamTimeout = chaosTimeout
	cfg.MaxExecution = chaosMaxExecution
	// The key API names the key_hash of a key in the replicas' logs
	// (chaosLog.cutAtMaxExecution).
	cfg.Extra += "admin:\n  token: " + chaosToken + "\n"
	// Above max_execution: a SIGTERM lets every detached call finish.
	cfg.ShutdownTimeout = 5 * time.Second
	replicas, firstFault := 2, 0
	if srv == nil {
		replicas, firstFault = 1, 1
	}
	ps := startReplicas(t, replicas, cfg)
	pids := newPIDSet()
	for _, p := range ps {
		pids.add(p.PID())
	}
	if srv != nil {
		pids.add(srv.PID())
	}
	cl := &chaosLog{keys: map[string]*keyLog{}}
	metrics := newMetricTally(ps)

	ctx, stopClients := context.WithCancel(context.Background())
	c := newClient(t, 10*time.Second)
	var clients sync.WaitGroup
	for w := range 8 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			runChaosClient(ctx, c, ps, cl, uint64(seed)*31+uint64(w), w)
		}()
	}

	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	faults := map[string]int{}
	for end := time.Now().Add(time.Duration(seconds) * time.Second); time.Now().Before(end); {
		pause(rng, 500*time.Millisecond, 2*time.Second)
		n := firstFault + rng.IntN(len(faultNames)-firstFault)
		t.Logf("%s %s", time.Now().Format("15:04:05.000"), faultNames[n])
		faults[faultNames[n]]++
		switch n {
		case 0:
			ended := cl.fault(faultNames[n], "")
			srv.Kill()
			pause(rng, 300*time.Millisecond, 2*time.Second)
			srv.Restart()
			ended()
			pids.add(srv.PID())
		case 1:
			ended := cl.fault(faultNames[n], "")
			up.Kill()
			pause(rng, 200*time.Millisecond, 1500*time.Millisecond)
			up.Restart()
			ended()
		case 2, 3:
			p := ps[rng.IntN(len(ps))]
			ended := cl.fault(faultNames[n], p.URL())
			metrics.save(t, p)
			if n == 2 {
				p.Kill()
				pause(rng, 100*time.Millisecond, time.Second)
			} else {
				p.Signal(syscall.SIGTERM)
				if code, ok := p.Wait(cfg.ShutdownTimeout + 3*time.Second); !ok || code != 0 {
					t.Errorf("proxy %s after SIGTERM: exited %v, code %d; want exit 0", p.name, ok, code)
				}
			}
			p.Restart()
			ended()
			pids.add(p.PID())
		}
	}
	t.Logf("faults injected: %v", faults)

	// Faults stop: let clients finish, let every in-flight request settle,
	// then wait out lock_ttl; no key may stay locked beyond it.
	stopClients()
	clients.Wait()
	waitIdle(t, ps)
	waitNoneDetached(t, ps)
	time.Sleep(lockTTL + 500*time.Millisecond) // leases of killed owners run out by the clock
	final := finalChaosPass(t, c, ps, cl)
	extra := metrics.total(t)
	cl.check(t, up, ps, extra, final)

	// No process or goroutine outlives the run.
	for _, p := range ps {
		p.Kill()
	}
	if srv != nil {
		srv.Kill()
	}
	up.Kill()
	c.CloseIdleConnections()
	pids.checkGone(t)
	checkGoroutines(t, goroutines)
}

// runChaosClient sends requests until ctx ends: half with a new key, half
// re-sending an earlier key, each retried like a real client.
func runChaosClient(ctx context.Context, c *http.Client, ps []*proxyProc, cl *chaosLog, seed uint64, w int) {
	rng := rand.New(rand.NewPCG(seed, 11))
	rt := retrier{Client: c, Bases: rotate(bases(ps), w), MaxAttempts: 8, MaxWait: 2 * time.Second, Rand: rng}
	for i := 0; i < 100000 && ctx.Err() == nil; i++ {
		key := cl.pick(rng)
		if key == "" || rng.IntN(2) == 0 {
			key = fmt.Sprintf("chaos-%d-%d", w, i)
		}
		work := strconv.Itoa(rng.IntN(300)) + "ms"
		if rng.IntN(chaosSlowOneIn) == 0 { // past upstream.timeout: 504, then the call goes on
			work = (chaosTimeout + time.Duration(rng.Int64N(int64(chaosSlowest-chaosTimeout)))).String()
		}
		got := rt.Do(ctx, request{Key: key, Body: key, Header: map[string]string{hdrSleep: work}})
		cl.add(key, got)
	}
}

// finalChaosPass sends every key once, with no retry: each must be
// replayed or executed, never refused.
func finalChaosPass(t *testing.T, c *http.Client, ps []*proxyProc, cl *chaosLog) map[string]reply {
	t.Helper()
	final := map[string]reply{}
	for i, key := range cl.keyNames() {
		final[key] = send(context.Background(), c, ps[i%len(ps)].URL(), request{Key: key, Body: key})
	}
	return final
}

// pause waits a random duration in [lo, hi): the rhythm of the faults.
func pause(rng *rand.Rand, lo, hi time.Duration) {
	time.Sleep(lo + time.Duration(rng.Int64N(int64(hi-lo))))
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
