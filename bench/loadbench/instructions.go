//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// --instructions counts what a request costs in instructions, where the
// load table measures it in seconds. An instruction count does not move
// with the host: a virtual machine whose CPU is stolen for seconds at a
// time, or shared with other work, gives the same count as a quiet one,
// so two builds, or two stacks, can be compared to a fraction of a percent
// on any machine.
//
// Each target runs alone under valgrind's callgrind, started afresh for
// each scenario, with GOMAXPROCS=1 like the pinned layout; the upstream
// and redis-server run natively. One connection sends a warm-up, counting
// starts (callgrind_control --instr=on), the counted requests go out one
// after the other, and the counters are dumped (--dump): their total over
// the requests sent is the figure. What it leaves out: the
// kernel's work (system calls, the loopback network), which callgrind does
// not see and which is about a third of a forwarded request's CPU; waiting
// on caches and memory, which is most of what a growing store costs under
// load; and the scheduling of several requests at once, since the
// requests go one at a time. Read it as the process's own work a request,
// deterministic; the load table says what that work costs in time.
//
// The garbage collector is off in the counted process (GOGC=off): a
// collection's cost comes in whole cycles, and whether one fell inside the
// counted requests moved a count by 3% from run to run. Allocating is
// counted; the marking it later causes is not (the handler's allocations
// are bounded by TestHandlerAllocations instead). Go's asynchronous
// preemption is off too (GODEBUG=asyncpreemptoff=1): callgrind 3.19 aborts
// on the signal it uses. The counters are dumped before the process is
// killed for the same reason: callgrind aborts on SIGTERM.
//
// The target starts with callgrind's instrumentation off
// (--instr-atstart=no), so its start-up and warm-up run faster and leave
// nothing in the counters; it is switched on (callgrind_control
// --instr=on) just before the counted requests. Zeroing the counters of a
// process instrumented from the start gave the same totals, but charged
// the counted requests' costs to whatever stood on each goroutine's stack
// when they were zeroed, so that a dump could not say where they went.

// instrStoreTimeout is the one setting a counted proxy runs with beyond
// its defaults: under callgrind a process runs 50 to 100 times slower, and
// on a loaded host the Redis store's 250 ms deadline passed before the
// reply was read, failing the count. A deadline's length changes no
// instruction on a request that meets it.
const instrStoreTimeout = "IDEMPOTENCY_PROXY_STORE_REDIS_TIMEOUT=10s"

// countedScenarios are the scenarios --instructions counts, in its
// table's order: mixed is a blend of the other two keyed ones.
var countedScenarios = []scenario{noKey, miss, hit}

// instrScenarios keeps the counted ones of scens, in the table's order.
func instrScenarios(scens []scenario) ([]scenario, error) {
	var out []scenario
	for _, s := range countedScenarios {
		if slices.Contains(scens, s) {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("--instructions counts the scenarios no-key, miss and hit; none was asked for")
	}
	return out, nil
}

// unpinned is the layout of every process --instructions starts: a count
// does not depend on the CPU it is made on.
var unpinned = layout{name: "shared", clientCPU: -1, serverCPU: -1}

// instrWarmup is how many requests a counted target serves before
// counting starts: its pools, its connection to the upstream and its code
// paths are warm by then.
const instrWarmup = 200

// counted is one target as --instructions starts it, alone.
type counted struct {
	name    string
	isProxy bool
	// forwardsAll: the target runs in shadow mode, so a hit is forwarded,
	// not replayed (loader.forwardsAll).
	forwardsAll bool
	// start starts the target on kids and returns its PID and base URL.
	start func(ctx context.Context, kids *children) (pid int, base string, err error)
}

func (c counted) serves(scen scenario) bool { return target{name: c.name}.serves(scen) }

// instrSettings are the knobs of --instructions.
type instrSettings struct {
	requests int      // counted a cell
	conc     int      // connections sending at once
	warmup   int      // sent before counting starts
	peers    []string // peers.go
	scens    []scenario
	proxyBin string
	// dumpDir, when set, keeps every cell's callgrind dump, for
	// callgrind_annotate; else they go with the run's temporary directory.
	dumpDir string
	// accessLogOff counts memory-nolog and redis-nolog too (main.go).
	accessLogOff bool
	// shadow counts memory-shadow too (main.go).
	shadow     bool
	stderrPipe bool // --stderr pipe (children.go)
	// baseline, when set, is what every cell is checked against
	// (instrbaseline.go); writeBaseline, when set, receives the counts.
	baseline      instrBaseline
	writeBaseline string
}

// countInstructions counts every target's instructions a request and
// prints the table.
func countInstructions(ctx context.Context, is instrSettings, stdout, stderr io.Writer) error {
	valgrind, err := exec.LookPath("valgrind")
	if err != nil {
		return fmt.Errorf("--instructions runs each target under valgrind: %w (Debian package valgrind)", err)
	}
	control, err := exec.LookPath("callgrind_control")
	if err != nil {
		return fmt.Errorf("--instructions controls callgrind with callgrind_control: %w (Debian package valgrind)", err)
	}
	version, _ := exec.Command(valgrind, "--version").Output()
	started := time.Now()
	kids, err := newChildren(unpinned)
	if err != nil {
		return err
	}
	defer kids.killAll()
	bin, err := kids.proxyBinary(ctx, is.proxyBin)
	if err != nil {
		return err
	}
	_, upAddr, err := kids.startSelf(ctx, "upstream")
	if err != nil {
		return err
	}
	_, redisAddr, err := kids.startRedis(ctx)
	if err != nil {
		return err
	}
	targets := []counted{
		{name: "plain", start: func(ctx context.Context, k *children) (int, string, error) {
			pid, addr, err := k.startSelf(ctx, "plain", "--upstream", "http://"+upAddr)
			return pid, "http://" + addr, err
		}},
		{name: "memory", isProxy: true, start: func(ctx context.Context, k *children) (int, string, error) {
			pid, addr, _, err := k.startProxy(ctx, "proxy-memory", bin, upAddr, "", false)
			return pid, "http://" + addr, err
		}},
		{name: "redis", isProxy: true, start: func(ctx context.Context, k *children) (int, string, error) {
			pid, addr, _, err := k.startProxy(ctx, "proxy-redis", bin, upAddr, "redis://"+redisAddr+"/0", false)
			return pid, "http://" + addr, err
		}},
		{name: "floor", isProxy: true, start: func(ctx context.Context, k *children) (int, string, error) {
			pid, addr, err := k.startSelf(ctx, "floor")
			return pid, "http://" + addr, err
		}},
	}
	if is.accessLogOff {
		for _, v := range []struct{ name, redisURL string }{{"memory-nolog", ""}, {"redis-nolog", "redis://" + redisAddr + "/3"}} {
			var storeArgs []string
			if v.redisURL != "" {
				storeArgs = []string{"--redis-url", v.redisURL}
			}
			targets = append(targets, counted{name: v.name, isProxy: true, start: func(ctx context.Context, k *children) (int, string, error) {
				pid, addr, _, err := k.startProxyOn(ctx, "proxy-"+v.name, bin, upAddr, storeArgs, accessLogOff, false)
				return pid, "http://" + addr, err
			}})
		}
	}
	if is.shadow {
		targets = append(targets, shadowTarget(bin, upAddr))
	}
	for _, p := range is.peers {
		peerBin, err := kids.buildPeer(ctx, p)
		if err != nil {
			return err
		}
		for _, store := range peerStores(redisAddr) {
			name := p + "-" + store.name
			targets = append(targets, counted{name: name, isProxy: true, start: func(ctx context.Context, k *children) (int, string, error) {
				t, err := k.startPeer(ctx, name, peerBin, upAddr, store.redisURL, false)
				return t.pid, t.base, err
			}})
		}
	}

	dumpDir := kids.dir
	if is.dumpDir != "" {
		dumpDir = is.dumpDir
	}
	rep := instrReport{scens: is.scens, counts: map[string]map[scenario]float64{}, forwardsAll: map[string]bool{}}
	for _, t := range targets {
		rep.targets = append(rep.targets, t.name)
		rep.forwardsAll[t.name] = t.forwardsAll
		rep.counts[t.name] = map[scenario]float64{}
		for _, scen := range is.scens {
			if !t.serves(scen) {
				continue
			}
			fmt.Fprintf(stderr, "loadbench: counting %s %s\n", t.name, scen)
			n, err := countCell(ctx, dumpDir, valgrind, control, t, scen, is)
			if err == nil && is.baseline.above(t.name, scen, n) {
				// A forwarded request's count moves 2–3% from run to run
				// with how the kernel hands over its bytes: a cell is
				// failed on the lower of two counts, not on one.
				fmt.Fprintf(stderr, "loadbench: %s %s counted above its baseline: counting it again\n", t.name, scen)
				var again float64
				if again, err = countCell(ctx, dumpDir, valgrind, control, t, scen, is); err == nil {
					n = min(n, again)
				}
			}
			if err != nil {
				return fmt.Errorf("%s %s: %w", t.name, scen, err)
			}
			rep.counts[t.name][scen] = n
		}
	}
	conns := "one connection"
	if is.conc > 1 {
		conns = strconv.Itoa(is.conc) + " connections"
	}
	fmt.Fprintf(stdout, "loadbench --instructions: %s, %s, %d requests counted per cell after %d, %s, GOMAXPROCS=1, run took %s\n",
		strings.TrimSpace(string(version)), runtime.Version(), is.requests, is.warmup, conns, time.Since(started).Round(time.Second))
	fmt.Fprintf(stdout, "user-space instructions of the target's process per request; the kernel's work (system calls, loopback) is not counted\n")
	fmt.Fprintf(stdout, "%s; store.redis.timeout: 10s, as callgrind slows the process\n\n", proxyConfig(is.stderrPipe))
	rep.write(stdout)
	if is.writeBaseline != "" {
		if err := writeBaselineFile(rep, is.writeBaseline); err != nil {
			return err
		}
	}
	if is.baseline != nil {
		return is.baseline.check(rep, stdout)
	}
	return nil
}

// shadowTarget is the memory store with mode: shadow in the defaults, as
// a user rolls the proxy out in front of a legacy service: what it counts
// beside memory is what watching costs against enforcing.
func shadowTarget(bin, upAddr string) counted {
	return counted{name: "memory-shadow", isProxy: true, forwardsAll: true, start: func(ctx context.Context, k *children) (int, string, error) {
		pid, addr, _, err := k.startProxyOn(ctx, "proxy-memory-shadow", bin, upAddr, nil, shadowMode, false)
		return pid, "http://" + addr, err
	}}
}

func writeBaselineFile(rep instrReport, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--write-baseline: %w", err)
	}
	if err := writeInstrBaseline(rep, f); err != nil {
		f.Close()
		return fmt.Errorf("--write-baseline: %w", err)
	}
	return f.Close()
}

// countCell starts t alone under callgrind and returns its instructions
// per request of scen.
func countCell(ctx context.Context, dir, valgrind, control string, t counted, scen scenario, is instrSettings) (float64, error) {
	out := filepath.Join(dir, fmt.Sprintf("callgrind-%s-%s.out", t.name, scen))
	kids, err := newChildren(unpinned)
	if err != nil {
		return 0, err
	}
	defer kids.killAll()
	kids.stderrPipe = is.stderrPipe
	kids.wrap = []string{valgrind, "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=" + out}
	kids.env = []string{"GOMAXPROCS=1", "GOGC=off", "GODEBUG=asyncpreemptoff=1", instrStoreTimeout}
	pid, base, err := t.start(ctx, kids)
	if err != nil {
		return 0, err
	}
	n, err := countRequests(ctx, control, pid, base, out, t, scen, is)
	if err != nil {
		return 0, fmt.Errorf("%w\n%s", err, kids.logTail(pid))
	}
	return n, nil
}

// instrRunBound bounds each run of requests in time, as their count
// bounds them: under callgrind a request takes a few milliseconds.
const instrRunBound = 10 * time.Minute

// countRequests warms up the target in process pid, counts its
// instructions over is.requests of scen, and returns them per request.
func countRequests(ctx context.Context, control string, pid int, base, out string, t counted, scen scenario, is instrSettings) (float64, error) {
	l := &loader{runID: randomID(), forwardsAll: t.forwardsAll}
	if scen == hit {
		if err := l.warmHits(ctx, base, t.isProxy); err != nil {
			return 0, err
		}
	}
	l.limit = is.warmup
	if _, err := l.run(ctx, base, t.isProxy, scen, is.conc, instrRunBound); err != nil {
		return 0, err
	}
	if err := callgrindControl(ctx, control, "--instr=on", pid); err != nil {
		return 0, err
	}
	l.limit = is.requests
	smp, err := l.run(ctx, base, t.isProxy, scen, is.conc, instrRunBound)
	if err == nil && smp.requests == 0 {
		err = errors.New("no request answered while counting")
	}
	if err != nil {
		return 0, err
	}
	// Dump files are numbered from 1 in the order they are written. A
	// dump left by an earlier run would be read as this one's: it is
	// removed first.
	_ = os.Remove(out + ".1")
	if err := callgrindControl(ctx, control, "--dump", pid); err != nil {
		return 0, err
	}
	total, err := readCallgrindTotal(ctx, out+".1")
	if err != nil {
		return 0, err
	}
	return float64(total) / float64(smp.requests), nil
}

// callgrindControl sends a command to the callgrind run in process pid and
// waits for it to be done.
func callgrindControl(ctx context.Context, control, command string, pid int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	msg, err := exec.CommandContext(ctx, control, command, strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("callgrind_control %s: %w\n%s", command, err, msg)
	}
	return nil
}

// readCallgrindTotal waits for a dump to be written, then reads its total.
// callgrind writes the file while callgrind_control returns, so an
// incomplete one has no totals line yet.
func readCallgrindTotal(ctx context.Context, path string) (uint64, error) {
	var total uint64
	err := poll(ctx, 30*time.Second, func() (bool, error) {
		f, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		defer f.Close()
		n, ok, err := callgrindTotal(f)
		total = n
		return ok, err
	})
	return total, err
}

// callgrindTotal reads the "totals:" line of a callgrind output file (or
// "summary:", which older versions write instead) for the first event,
// instructions. ok is false when the file has neither yet.
func callgrindTotal(r io.Reader) (n uint64, ok bool, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		key, rest, found := strings.Cut(line, ":")
		if !found || (key != "totals" && key != "summary") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false, fmt.Errorf("callgrind output: %q has no count", line)
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("callgrind output: %q: %w", line, err)
		}
		if key == "totals" {
			return n, true, nil
		}
		ok = true
	}
	return n, ok, sc.Err()
}

// instrReport is the table --instructions prints.
type instrReport struct {
	targets []string
	scens   []scenario
	counts  map[string]map[scenario]float64 // target → scenario → instructions a request
	// forwardsAll names the targets whose hits are forwarded, not
	// replayed (memory-shadow).
	forwardsAll map[string]bool
}

// write prints K instructions a request for every target and scenario,
// what each costs against the plain proxy's forwarded request (the floor
// of the load table), and every stack's idempotency tax: a keyed request's
// count above the same target's no-key request.
func (r instrReport) write(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := "target\t"
	for _, s := range r.scens {
		header += s.String() + "\t"
	}
	floor, hasFloor := r.counts["plain"][noKey]
	if hasFloor {
		for _, s := range r.scens {
			header += s.String() + " ÷ plain\t"
		}
	}
	fmt.Fprintln(tw, header)
	for _, t := range r.targets {
		line := t + "\t"
		for _, s := range r.scens {
			line += kInstr(r.counts[t], s) + "\t"
		}
		if hasFloor {
			for _, s := range r.scens {
				if n, ok := r.counts[t][s]; ok {
					line += fmt.Sprintf("%.2f×", n/floor) + "\t"
				} else {
					line += "–\t"
				}
			}
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	if !slices.Contains(r.scens, noKey) || !slices.ContainsFunc(r.scens, func(s scenario) bool { return s != noKey }) {
		return // no tax without a no-key request and a keyed one
	}
	fmt.Fprintf(w, "\nidempotency tax: K instructions a request above the same target's no-key request\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tmiss\thit\t")
	for _, t := range r.targets {
		base, ok := r.counts[t][noKey]
		if !ok || t == "plain" { // the floor forwards whatever it is sent: no tax
			continue
		}
		line := t + "\t"
		for _, s := range []scenario{miss, hit} {
			if n, ok := r.counts[t][s]; ok {
				line += fmt.Sprintf("%+.1fK", (n-base)/1000) + "\t"
			} else {
				line += "–\t"
			}
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}

func kInstr(counts map[scenario]float64, s scenario) string {
	n, ok := counts[s]
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.1fK", n/1000)
}
