//go:build linux

// Command loadbench measures idempotency-proxy against a stock
// httputil.ReverseProxy in the same run, on loopback:
//
//	go -C bench run ./loadbench                    # full run, a few minutes
//	go -C bench run ./loadbench --quick            # under 30 s, what CI runs
//	go -C bench run ./loadbench --layout pinned    # generator on one CPU, the rest on another
//	go -C bench run ./loadbench --peers fiber      # Fiber's idempotency middleware beside us, same rounds
//	go -C bench run ./loadbench --stores postgres,file # the durable stores too, same rounds
//	go -C bench run ./loadbench --scaling          # Redis miss and hit over body sizes and clients
//	go -C bench run ./loadbench --footprint        # memory store: bytes per record, RSS at 1M records
//	go -C bench run ./loadbench --footprint-proxy  # the same through the proxy binary, over HTTP
//	go -C bench run ./loadbench --instructions     # instructions per request under callgrind, host-independent
//	go -C bench run ./loadbench --access-log-off   # the defaults with access_log: false too, beside them
//	go -C bench run ./loadbench --instructions --shadow # memory-shadow (mode: shadow) counted too
//
// It starts an upstream and the plain proxy (this program re-executed in a
// helper mode, so each has its own CPU counters), the idempotency-proxy
// binary on the memory store and on a redis-server of its own (both with
// the product's defaults, as a user runs it), drives
// closed-loop load at each concurrency, alternating targets round by round
// so drift hits all of them, and prints one table of medians with their
// spread. It exits non-zero when a request fails, and with --instructions
// --baseline when a count rose above the committed one, never because a
// throughput figure misses its goal. docs/performance.md explains the columns.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// settings are the knobs of a run.
type settings struct {
	concs    []int
	scens    []scenario
	rounds   int
	duration time.Duration // one target, one scenario, one round
	warmup   time.Duration
	proxyBin string
	// compareBin, when set, is a second idempotency-proxy binary measured
	// in the same rounds as memory-b and redis-b: an A/B of two builds
	// under the same drift.
	compareBin string
	// peers are other idempotency stacks measured in the same rounds
	// (peers.go): "fiber" adds fiber-memory and fiber-redis.
	peers []string
	// profileDir, when set, receives a CPU profile of every proxy target
	// for each scenario, taken over its first measurement at the highest
	// concurrency.
	profileDir string
	// stores are durable stores measured in the same rounds (stores.go),
	// each as a target of its name.
	stores []string
	layout layout
	quick  bool // --quick: the report says its figures are noise
	// bracket measures the plain proxy around every other target
	// (roundOrder), so that a ratio compares measurements seconds apart.
	bracket bool
	// accessLogOff measures the targets memory-nolog and redis-nolog too:
	// the defaults with access_log: false, beside them.
	accessLogOff bool
	// stderrPipe (--stderr pipe): the children write to pipes, not files.
	stderrPipe bool
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loadbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "short run (under 30 s) that checks the benchmark works; its figures are noisy")
	concList := fs.String("concurrency", "1,32", "comma-separated numbers of concurrent clients")
	rounds := fs.Int("rounds", 8, "rounds per concurrency; each runs every scenario against every target")
	duration := fs.Duration("duration", time.Second, "length of one measurement")
	scenList := fs.String("scenarios", "miss,hit,mixed,no-key", "comma-separated scenarios to run")
	proxyBin := fs.String("proxy-bin", "", "idempotency-proxy binary to measure (default: build ./cmd/idempotency-proxy)")
	compareBin := fs.String("compare-bin", "", "a second idempotency-proxy binary, measured in the same rounds as memory-b and redis-b")
	peerList := fs.String("peers", "", "comma-separated peers measured in the same rounds: fiber (Fiber v3's idempotency and proxy middleware, memory and Redis)")
	storeList := fs.String("stores", "", "comma-separated durable stores measured in the same rounds: postgres (a postgres of the run's own), file, file-fsync (the file store with fsync off, on)")
	profileDir := fs.String("profile", "", "write CPU profiles of the proxies (pprof, one per scenario and target, at the highest concurrency) to this directory; with --instructions, every cell's callgrind dump")
	accessLogOff := fs.Bool("access-log-off", false, "measure memory-nolog and redis-nolog too: the defaults with access_log: false, in the same rounds (or, with --instructions, counted beside them)")
	shadow := fs.Bool("shadow", false, "--instructions: count memory-shadow too: the memory store with mode: shadow in the defaults, whose hits are forwarded, not replayed")
	stderrTo := fs.String("stderr", "file", "where the targets' stderr goes: file (as a container runtime writes it) or pipe (drained by the benchmark, as a log collector reads it)")
	bracket := fs.Bool("bracket", true, "measure the plain proxy before and after every other target, and take each ratio to the mean of the two; false: once a round")
	layoutName := fs.String("layout", "shared", "where processes run: shared (anywhere) or pinned (load generator on one CPU; upstream, proxies and Redis on another, GOMAXPROCS=1)")
	scaling := fs.Bool("scaling", false, "measure Redis miss and hit over response body sizes and numbers of clients instead of the main table")
	bodies := fs.String("bodies", "200,16KiB,256KiB,1020KiB", "--scaling: comma-separated response body sizes")
	scalingConcs := fs.String("scaling-concurrency", "1,32,256,1024", "--scaling: comma-separated numbers of concurrent clients")
	footprint := fs.Bool("footprint", false, "measure the memory store's bytes per record and RSS with --records records, instead of the main table")
	footprintProxy := fs.Bool("footprint-proxy", false, "record --records keys in the idempotency-proxy binary through the load generator and report its RSS, instead of the main table")
	records := fs.Int("records", 1_000_000, "--footprint, --footprint-proxy: records to store")
	instructions := fs.Bool("instructions", false, "count each target's instructions per request under valgrind's callgrind, one target at a time, instead of the main table: a figure the host's speed does not move")
	requests := fs.Int("requests", 2000, "--instructions: requests counted per target and scenario")
	baseline := fs.String("baseline", "", "--instructions: compare every cell with this baseline file (bench/instructions-baseline.txt) and fail when one counts more than 3% above it")
	writeBaseline := fs.String("write-baseline", "", "--instructions: write the counts to this file, in the baseline's format")
	fillStore := fs.Int("fill-memory-store", 0, "internal: fill a memory store with this many records and print what it takes")
	serveUp := fs.String("serve-upstream", "", "internal: run as the benchmark's upstream on this address")
	servePl := fs.String("serve-plain", "", "internal: run as the plain reverse proxy on this address")
	serveFl := fs.String("serve-floor", "", "internal: run as the replay floor on this address")
	upstream := fs.String("upstream", "", "internal: upstream URL of --serve-plain")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	switch {
	case *serveUp != "":
		err = serveUpstream(*serveUp)
	case *servePl != "":
		err = servePlain(*servePl, *upstream)
	case *serveFl != "":
		err = serveFloor(*serveFl)
	case *fillStore > 0:
		err = fillMemoryStore(*fillStore, stdout)
	default:
		s := settings{rounds: *rounds, duration: *duration, warmup: *duration / 3, proxyBin: *proxyBin,
			compareBin: *compareBin, profileDir: *profileDir, bracket: *bracket, accessLogOff: *accessLogOff}
		if *quick {
			s.rounds, s.duration, s.warmup, s.quick = 2, 200*time.Millisecond, 100*time.Millisecond, true
		}
		var sc scalingSettings
		s.concs, err = parseConcs(*concList)
		if err == nil {
			s.scens, err = parseScenarios(*scenList)
		}
		if err == nil {
			s.layout, err = newLayout(*layoutName)
		}
		if err == nil {
			s.peers, err = parsePeers(*peerList)
		}
		if err == nil {
			s.stores, err = parseStores(*storeList)
		}
		if err == nil {
			s.stderrPipe, err = parseStderr(*stderrTo)
		}
		if err == nil && s.profileDir != "" {
			err = os.MkdirAll(s.profileDir, 0o755)
		}
		if err == nil && *scaling {
			sc, err = parseScaling(*bodies, *scalingConcs)
		}
		if err == nil && (s.rounds < 1 || s.duration <= 0 || *records < 1 || *requests < 1) {
			err = errors.New("--rounds, --duration, --records and --requests need positive values")
		}
		is := instrSettings{requests: *requests, warmup: instrWarmup, peers: s.peers, proxyBin: s.proxyBin, dumpDir: s.profileDir, accessLogOff: s.accessLogOff, shadow: *shadow, stderrPipe: s.stderrPipe,
			writeBaseline: *writeBaseline}
		if err == nil && *baseline != "" {
			is.baseline, err = loadInstrBaseline(*baseline)
		}
		if len(s.concs) > 0 {
			is.conc = s.concs[0] // 1 unless asked: a count is cleanest one request at a time
		}
		if err == nil && *instructions {
			is.scens, err = instrScenarios(s.scens)
		}
		if err == nil && *shadow && !*instructions {
			err = errors.New("--shadow adds a target to --instructions only")
		}
		if err != nil {
			fmt.Fprintln(stderr, "loadbench:", err)
			return 2
		}
		switch {
		case *instructions:
			err = interruptible(func(ctx context.Context) error { return countInstructions(ctx, is, stdout, stderr) })
		case *footprint:
			err = measureFootprint(*records, s.layout, stdout, stderr)
		case *footprintProxy:
			err = interruptible(func(ctx context.Context) error { return measureProxyFootprint(ctx, s, *records, stdout, stderr) })
		case *scaling:
			err = interruptible(func(ctx context.Context) error { return benchScaling(ctx, s, sc, stdout, stderr) })
		default:
			err = interruptible(func(ctx context.Context) error { return bench(ctx, s, stdout, stderr) })
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadbench:", err)
		return 1
	}
	return 0
}

// parseStderr reads --stderr: true for pipe.
func parseStderr(s string) (bool, error) {
	switch s {
	case "file":
		return false, nil
	case "pipe":
		return true, nil
	}
	return false, fmt.Errorf("--stderr %q: want file or pipe", s)
}

func parseScenarios(s string) ([]scenario, error) {
	var out []scenario
	for f := range strings.SplitSeq(s, ",") {
		i := slices.IndexFunc(scenarios, func(sc scenario) bool { return sc.String() == strings.TrimSpace(f) })
		if i < 0 {
			return nil, fmt.Errorf("unknown scenario %q", f)
		}
		out = append(out, scenarios[i])
	}
	return out, nil
}

// maxConc is the most concurrent clients a run may have: each is a
// connection to the target, which opens one to the upstream in turn.
const maxConc = 1024

func parseConcs(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > maxConc {
			return nil, fmt.Errorf("bad concurrency %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func bench(ctx context.Context, s settings, stdout, stderr io.Writer) (err error) {
	started, load := time.Now(), loadAverage()
	ticks, ticksOK := readCPUTicks()
	rg, err := setUp(ctx, s, slices.Max(s.concs))
	defer rg.close()
	if err != nil {
		return err
	}
	targets, upstreamBase := rg.targets, rg.upstream
	runID := randomID()
	l := &loader{runID: runID}
	for _, t := range targets {
		if err := l.warmHits(ctx, t.base, t.isProxy); err != nil {
			return fmt.Errorf("%s: %w\n%s", t.name, err, rg.kids.logTail(t.pid))
		}
	}
	rep := &report{concs: s.concs, rounds: map[cellKey][]round{}, drift: map[cellKey][]float64{}, unsteady: unsteadyCounts{}, quick: s.quick}
	for _, t := range targets {
		rep.targets = append(rep.targets, t.name)
	}
	fmt.Fprintf(stderr, "loadbench: counting Redis round trips\n")
	if rep.trips, err = countTrips(ctx, l, targets[2], s.scens, s.warmup); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "loadbench: unloaded latency\n")
	if err := unloaded(ctx, l, rep, upstreamBase, targets[1], s); err != nil {
		return err
	}
	for _, c := range s.concs {
		fmt.Fprintf(stderr, "loadbench: concurrency %d\n", c)
		if err := loadRounds(ctx, l, rep, targets, c, s); err != nil {
			return rg.withLog(err)
		}
	}
	fmt.Fprintf(stdout, "loadbench: %d CPUs, %s, %d rounds × %s per cell, concurrency %v, run took %s; load average %s before, %s after; %s of CPU time stolen by the hypervisor\n",
		runtime.NumCPU(), runtime.Version(), s.rounds, s.duration, s.concs, time.Since(started).Round(time.Second), load, loadAverage(), stolenSince(ticks, ticksOK))
	rg.describe(stdout)
	rep.write(stdout)
	return nil
}

// loadRounds measures every scenario against every target, rounds times,
// reversing the order of the targets every other round. With s.bracket,
// the plain proxy is measured before the first target, between each two
// and after the last (roundOrder), and each target's ratios are to the
// mean of the two measurements around it.
func loadRounds(ctx context.Context, l *loader, rep *report, targets []target, conc int, s settings) error {
	if !slices.ContainsFunc(targets, target.isPlain) {
		return errors.New("no plain proxy among the targets: there is nothing to take ratios to")
	}
	for _, scen := range s.scens {
		for _, t := range targets {
			if !t.serves(scen) {
				continue
			}
			if _, err := l.run(ctx, t.base, t.isProxy, scen, conc, s.warmup); err != nil {
				return err
			}
		}
	}
	for r := range s.rounds {
		for _, scen := range s.scens {
			profiled := map[string]bool{}
			remeasures := maxRemeasures
			if s.quick {
				remeasures = 0
			}
			order, results, what, err := measureRound(roundOrder(targets, scen, r, s.bracket), s.bracket, remeasures, func(t target) (round, error) {
				// Every measurement of the first round is profiled, so
				// that a ratio compares two sampled measurements; a
				// target's first profile is kept, the plain proxy's
				// later ones are discarded.
				var prof *profile
				if r == 0 && conc == slices.Max(s.concs) {
					prof = startProfile(s.profileDir, t, scen, s.duration, !profiled[t.name])
					profiled[t.name] = true
				}
				res, err := measure(ctx, l, t, scen, conc, s.duration)
				if err == nil {
					err = prof.wait()
				}
				return res, err
			})
			if err != nil {
				return err
			}
			for i, res := range withRatios(order, results) {
				k := cellKey{conc, scen, order[i].name}
				switch what[i] {
				case kept:
					rep.rounds[k] = append(rep.rounds[k], res)
				case unsteady:
					rep.unsteady[k]++
				}
			}
			if s.bracket {
				k := cellKey{conc, scen, "plain"}
				rep.drift[k] = append(rep.drift[k], keptDrift(order, results, what)...)
			}
		}
	}
	return nil
}

// roundOrder returns the targets that serve scen in round r's order,
// every other round reversed, so that drift through a round favours no
// target. With bracket, the plain proxy comes first and again after every
// other target.
func roundOrder(targets []target, scen scenario, r int, bracket bool) []target {
	var order []target
	var plain target
	for _, t := range targets {
		switch {
		case bracket && t.isPlain():
			plain = t
		case t.serves(scen):
			order = append(order, t)
		}
	}
	if r%2 == 1 {
		slices.Reverse(order)
	}
	if !bracket {
		return order
	}
	bracketed := []target{plain}
	for _, t := range order {
		bracketed = append(bracketed, t, plain)
	}
	return bracketed
}

// withRatios sets each result's ratios to the plain proxy: to the mean of
// the plain proxy's measurements just before and just after it where the
// order brackets it, else to the round's one measurement of the plain
// proxy.
func withRatios(order []target, results []round) []round {
	once := slices.IndexFunc(order, target.isPlain)
	out := slices.Clone(results)
	for i := range out {
		if order[i].isPlain() {
			out[i].rateX, out[i].cpuX = 1, 1
			continue
		}
		before, after := results[once], results[once]
		if bracketedAt(order, i) {
			before, after = results[i-1], results[i+1]
		}
		rate, cpu := (before.rate+after.rate)/2, (before.cpu+after.cpu)/2
		out[i].rateX, out[i].cpuX = out[i].rate/rate, out[i].cpu/cpu
	}
	return out
}

// bracketDrift returns, for each target the plain proxy brackets, how far
// the plain proxy's throughput after it differs from before it, as a
// fraction of their mean: how much the host's speed moved while the
// target was measured, and so how much its ratio can be trusted.
func bracketDrift(order []target, results []round) []float64 {
	return keptDrift(order, results, make([]measured, len(order)))
}

// bracketedAt reports whether order[i] is a target with the plain proxy
// measured just before and just after it.
func bracketedAt(order []target, i int) bool {
	return i > 0 && i+1 < len(order) && !order[i].isPlain() && order[i-1].isPlain() && order[i+1].isPlain()
}

// measure runs one scenario against one target and reads the CPU time
// every process involved used meanwhile: the target, its redis-server, the
// upstream and this load generator.
func measure(ctx context.Context, l *loader, t target, scen scenario, conc int, d time.Duration) (round, error) {
	pids := []int{t.pid, os.Getpid(), t.upPID, t.storePID}
	ticks, ticksOK := readCPUTicks()
	before, err := cpuTimes(pids, t.storeTree)
	if err != nil {
		return round{}, fmt.Errorf("%s: %w", t.name, err)
	}
	smp, err := l.run(ctx, t.base, t.isProxy, scen, conc, d)
	if err != nil {
		return round{}, fmt.Errorf("%s: %w", t.name, err)
	}
	if smp.requests == 0 {
		return round{}, fmt.Errorf("%s %s: no request completed", t.name, scen)
	}
	after, err := cpuTimes(pids, t.storeTree)
	if err != nil {
		return round{}, fmt.Errorf("%s: %w", t.name, err)
	}
	perReq := func(i int) float64 {
		if pids[i] == 0 {
			return math.NaN()
		}
		return float64(after[i]-before[i]) / 1e3 / float64(smp.requests)
	}
	return round{
		rate:      smp.rate(),
		p50:       percentile(smp.latencies, 0.50),
		p99:       percentile(smp.latencies, 0.99),
		cpu:       perReq(0),
		clientCPU: perReq(1),
		upCPU:     perReq(2),
		storeCPU:  perReq(3),
		steal:     stealSince(ticks, ticksOK),
	}, nil
}

// cpuTimes reads the CPU time of each process; a zero PID reads as zero.
// With storeTree the last one's children count too (postgres's backends).
func cpuTimes(pids []int, storeTree bool) ([]time.Duration, error) {
	out := make([]time.Duration, len(pids))
	for i, pid := range pids {
		if pid == 0 {
			continue
		}
		read := cpuTime
		if storeTree && i == len(pids)-1 {
			read = treeCPUTime
		}
		var err error
		if out[i], err = read(pid); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// countTrips measures Redis commands per request for each scenario in a
// calibration pass with MONITOR on (see monitor).
func countTrips(ctx context.Context, l *loader, t target, scens []scenario, d time.Duration) (map[scenario]float64, error) {
	m, err := startMonitor(t.storeAddr)
	if err != nil {
		return nil, err
	}
	defer m.close()
	trips := map[scenario]float64{}
	const conc = 4
	for _, scen := range scens {
		// A warm-up fills the store's connection pool first.
		if _, err := l.run(ctx, t.base, t.isProxy, scen, conc, d/2); err != nil {
			return nil, err
		}
		if _, err := m.count(); err != nil {
			return nil, err
		}
		smp, err := l.run(ctx, t.base, t.isProxy, scen, conc, d)
		if err != nil {
			return nil, err
		}
		n, err := m.count()
		if err != nil {
			return nil, err
		}
		trips[scen] = float64(n) / float64(max(smp.requests, 1))
	}
	return trips, nil
}

// unloaded compares, one request at a time, a replay from the memory store
// with a request sent straight to the upstream.
func unloaded(ctx context.Context, l *loader, rep *report, upstream string, mem target, s settings) error {
	for range s.rounds {
		direct, err := l.run(ctx, upstream, false, hit, 1, s.duration/2)
		if err != nil {
			return err
		}
		replay, err := l.run(ctx, mem.base, true, hit, 1, s.duration/2)
		if err != nil {
			return err
		}
		rep.direct = append(rep.direct, percentile(direct.latencies, 0.5))
		rep.hitP50 = append(rep.hitP50, percentile(replay.latencies, 0.5))
	}
	return nil
}

// loadAverage returns the 1-minute load average: other work on the machine
// widens the spread of every figure.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

func randomID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
