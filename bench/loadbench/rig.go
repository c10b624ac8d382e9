//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// target is one process under load.
type target struct {
	name      string
	base      string // http://127.0.0.1:N
	pid       int
	storePID  int    // redis-server, or 0
	storeAddr string // redis-server host:port, or ""
	storeTree bool   // the store's CPU is its process's and its children's (postgres)
	upPID     int    // the upstream every target forwards to
	upAddr    string // its host:port
	admin     string // the idempotency-proxy's admin address, or ""
	pprof     string // where /debug/pprof/profile is answered under --profile, or ""
	isProxy   bool
	peer      bool // another stack (peers.go): admin answers /gomaxprocs itself
}

// serves reports whether t answers scen: the floor only replays.
func (t target) serves(scen scenario) bool { return t.name != "floor" || scen == hit }

// isPlain reports whether t is the plain proxy, the baseline of every ratio.
func (t target) isPlain() bool { return t.name == "plain" }

// rig is the set of processes a run measures, laid out on the CPUs.
type rig struct {
	kids     *children
	layout   layout
	targets  []target // plain, memory, redis, floor
	upstream string   // base URL
}

// setUp builds the proxy, readies this process for conc clients, pins it
// when the layout says so, and starts every child. The rig it returns must
// be closed, also with an error.
func setUp(ctx context.Context, s settings, conc int) (*rig, error) {
	kids, err := newChildren(s.layout)
	rg := &rig{kids: kids, layout: s.layout}
	if err != nil {
		return rg, err
	}
	kids.stderrPipe = s.stderrPipe
	// Before pinning: the build may use every CPU.
	bin, err := kids.proxyBinary(ctx, s.proxyBin)
	if err != nil {
		return rg, err
	}
	// Each client is a socket here; the target's own sockets are its
	// business (Go raises its soft limit at start-up, Redis allows 10,000
	// clients).
	if err := raiseFileLimit(uint64(conc) + 256); err != nil {
		return rg, err
	}
	if s.layout.pinned() {
		if err := pinSelf(s.layout.clientCPU); err != nil {
			return rg, err
		}
		runtime.GOMAXPROCS(1)
	}
	rg.targets, rg.upstream, err = startAll(ctx, kids, bin, s.profileDir != "")
	if err == nil && len(s.peers) > 0 {
		var more []target
		more, err = startPeers(ctx, kids, s.peers, rg.targets, s.profileDir != "")
		rg.targets = append(rg.targets, more...)
	}
	if err == nil && len(s.stores) > 0 {
		var more []target
		more, err = startStores(ctx, kids, bin, s.stores, rg.targets, s.profileDir != "")
		rg.targets = append(rg.targets, more...)
	}
	if err == nil && s.compareBin != "" {
		var more []target
		more, err = startCompared(ctx, kids, s.compareBin, rg.targets, s.profileDir != "")
		rg.targets = append(rg.targets, more...)
	}
	if err == nil && s.accessLogOff {
		var more []target
		more, err = startVariant(ctx, kids, bin, "nolog", 3, accessLogOff, rg.targets, s.profileDir != "")
		rg.targets = append(rg.targets, more...)
	}
	return rg, err
}

// withLog adds to an error that names a target the end of that target's
// log: why a proxy answered 503 is in it.
func (rg *rig) withLog(err error) error {
	for _, t := range rg.targets {
		if strings.HasPrefix(err.Error(), t.name+": ") || strings.HasPrefix(err.Error(), t.name+" ") {
			if tail := rg.kids.logTail(t.pid); tail != "" {
				return fmt.Errorf("%w\n%s log:\n%s", err, t.name, tail)
			}
		}
	}
	return err
}

func (rg *rig) close() {
	if rg != nil && rg.kids != nil {
		rg.kids.killAll()
	}
}

// raiseFileLimit makes sure this process may open n file descriptors.
func raiseFileLimit(n uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("getrlimit: %w", err)
	}
	if lim.Cur >= n {
		return nil
	}
	if lim.Max < n {
		return fmt.Errorf("the open files limit is %d (hard), %d clients need %d: raise it (ulimit -Hn)", lim.Max, n-256, n)
	}
	lim.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("setrlimit: %w", err)
	}
	return nil
}

// startAll starts the upstream, the plain proxy, redis-server, both
// idempotency-proxy instances and the replay floor; targets come back as
// plain, memory, redis, floor.
func startAll(ctx context.Context, kids *children, bin string, pprof bool) ([]target, string, error) {
	upPID, upAddr, err := kids.startSelf(ctx, "upstream")
	if err != nil {
		return nil, "", err
	}
	plainPID, plainAddr, err := kids.startSelf(ctx, "plain", "--upstream", "http://"+upAddr)
	if err != nil {
		return nil, "", err
	}
	redisPID, redisAddr, err := kids.startRedis(ctx)
	if err != nil {
		return nil, "", err
	}
	memPID, memAddr, memAdmin, err := kids.startProxy(ctx, "proxy-memory", bin, upAddr, "", pprof)
	if err != nil {
		return nil, "", err
	}
	rdPID, rdAddr, rdAdmin, err := kids.startProxy(ctx, "proxy-redis", bin, upAddr, "redis://"+redisAddr+"/0", pprof)
	if err != nil {
		return nil, "", err
	}
	floorPID, floorAddr, err := kids.startSelf(ctx, "floor")
	if err != nil {
		return nil, "", err
	}
	// The proxies answer /debug/pprof/profile on their admin listener, the
	// plain proxy and the floor on their own address (newMux).
	var plainProf, memProf, rdProf, floorProf string
	if pprof {
		plainProf, memProf, rdProf, floorProf = plainAddr, memAdmin, rdAdmin, floorAddr
	}
	return []target{
		{name: "plain", base: "http://" + plainAddr, pid: plainPID, upPID: upPID, upAddr: upAddr, pprof: plainProf},
		{name: "memory", base: "http://" + memAddr, pid: memPID, upPID: upPID, upAddr: upAddr, admin: memAdmin, pprof: memProf, isProxy: true},
		{name: "redis", base: "http://" + rdAddr, pid: rdPID, upPID: upPID, upAddr: upAddr, admin: rdAdmin, pprof: rdProf, storePID: redisPID, storeAddr: redisAddr, isProxy: true},
		{name: "floor", base: "http://" + floorAddr, pid: floorPID, upPID: upPID, upAddr: upAddr, pprof: floorProf, isProxy: true},
	}, "http://" + upAddr, nil
}

// startCompared starts a second binary on the memory store and on the same
// redis-server, as the targets memory-b and redis-b. redis-b uses database 1:
// the hit keys it records must not collide with redis's, whose fingerprints
// differ in the Host they were sent to.
func startCompared(ctx context.Context, kids *children, bin string, ts []target, pprof bool) ([]target, error) {
	return startVariant(ctx, kids, bin, "b", 1, nil, ts, pprof)
}

// startVariant starts bin with env on the memory store and on the run's
// redis-server, in its database db, as the targets memory-<suffix> and
// redis-<suffix>: a configuration measured beside the defaults, never
// instead of them.
func startVariant(ctx context.Context, kids *children, bin, suffix string, db int, env []string, ts []target, pprof bool) ([]target, error) {
	mem, rd := ts[1], ts[2]
	up := mem.upAddr
	memName, rdName := "memory-"+suffix, "redis-"+suffix
	memPID, memAddr, memAdmin, err := kids.startProxyOn(ctx, "proxy-"+memName, bin, up, nil, env, pprof)
	if err != nil {
		return nil, err
	}
	rdURL := fmt.Sprintf("redis://%s/%d", rd.storeAddr, db)
	rdPID, rdAddr, rdAdmin, err := kids.startProxyOn(ctx, "proxy-"+rdName, bin, up, []string{"--redis-url", rdURL}, env, pprof)
	if err != nil {
		return nil, err
	}
	var memProf, rdProf string
	if pprof {
		memProf, rdProf = memAdmin, rdAdmin
	}
	return []target{
		{name: memName, base: "http://" + memAddr, pid: memPID, upPID: mem.upPID, admin: memAdmin, pprof: memProf, isProxy: true, upAddr: mem.upAddr},
		{name: rdName, base: "http://" + rdAddr, pid: rdPID, upPID: rd.upPID, admin: rdAdmin, pprof: rdProf, storePID: rd.storePID, storeAddr: rd.storeAddr, isProxy: true, upAddr: rd.upAddr},
	}, nil
}

// describe prints the layout and, for every process, the CPUs its threads
// may run on and the GOMAXPROCS it runs with, as read back from /proc and
// from the process itself: what was, not what was asked for.
func (rg *rig) describe(w io.Writer) {
	switch {
	case rg.layout.pinned():
		fmt.Fprintf(w, "layout pinned: load generator on CPU %d; upstream, plain proxy, proxies, floor, redis-server and postgres together on CPU %d; GOMAXPROCS=1 in every Go process\n",
			rg.layout.clientCPU, rg.layout.serverCPU)
	default:
		fmt.Fprintf(w, "layout shared: every process on every CPU, default GOMAXPROCS\n")
	}
	fmt.Fprintln(w, proxyConfig(rg.kids.stderrPipe))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "process\tpid\tCPUs\tGOMAXPROCS")
	row := func(name string, pid int, procs string) {
		cpus, err := threadCPUs(pid)
		if err != nil {
			cpus = "?"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", name, pid, cpus, procs)
	}
	row("load generator", os.Getpid(), fmt.Sprint(runtime.GOMAXPROCS(0)))
	if len(rg.targets) >= 4 {
		plain, mem, rd, floor := rg.targets[0], rg.targets[1], rg.targets[2], rg.targets[3]
		row("upstream", plain.upPID, selfGOMAXPROCS(rg.upstream))
		row("plain", plain.pid, selfGOMAXPROCS(plain.base))
		row("memory", mem.pid, proxyGOMAXPROCS(mem.admin))
		row("redis", rd.pid, proxyGOMAXPROCS(rd.admin))
		row("redis-server", rd.storePID, "–")
		row("floor", floor.pid, selfGOMAXPROCS(floor.base))
		for _, t := range rg.targets[4:] {
			if t.peer {
				row(t.name, t.pid, selfGOMAXPROCS("http://"+t.admin))
				continue
			}
			row(t.name, t.pid, proxyGOMAXPROCS(t.admin))
			if t.storeTree {
				row(t.name+" server", t.storePID, "–")
			}
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
}

// selfGOMAXPROCS asks a child started from this program.
func selfGOMAXPROCS(base string) string {
	body, err := get(base + "/gomaxprocs")
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(body)
}

// proxyGOMAXPROCS reads the runtime's own gauge from the proxy's metrics.
func proxyGOMAXPROCS(admin string) string {
	body, err := get("http://" + admin + "/metrics")
	if err != nil {
		return "?"
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_sched_gomaxprocs_threads "); ok {
			return v
		}
	}
	return "?"
}

func get(url string) (string, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), nil
}

// interruptible runs fn with a context that SIGINT or SIGTERM cancels. A
// signal closes the connections in use; a run that fails because of it is
// reported as interrupted rather than with the resulting read error.
func interruptible(fn func(ctx context.Context) error) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := fn(ctx)
	if err != nil && ctx.Err() != nil {
		return errors.New("interrupted")
	}
	return err
}
