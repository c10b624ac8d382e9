//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// The proxy footprint run (--footprint-proxy) records n keys in the
// idempotency-proxy binary on its memory store, through the load generator
// (the miss scenario, 32 clients, n requests exactly), and reads the
// process's RSS and heap figures before and after: the end-to-end
// counterpart of --footprint, at the cost of n requests' time.

// footprintTimeout bounds the fill.
const footprintTimeout = 15 * time.Minute

func measureProxyFootprint(ctx context.Context, s settings, n int, stdout, stderr io.Writer) (err error) {
	const conc = 32
	kids, err := newChildren(s.layout)
	if err != nil {
		return err
	}
	defer kids.killAll()
	kids.stderrPipe = s.stderrPipe
	bin, err := kids.proxyBinary(ctx, s.proxyBin)
	if err != nil {
		return err
	}
	if err := raiseFileLimit(conc + 256); err != nil {
		return err
	}
	if s.layout.pinned() {
		if err := pinSelf(s.layout.clientCPU); err != nil {
			return err
		}
		runtime.GOMAXPROCS(1)
	}
	_, upAddr, err := kids.startSelf(ctx, "upstream")
	if err != nil {
		return err
	}
	pid, addr, admin, err := kids.startProxy(ctx, "proxy-memory", bin, upAddr, "", false)
	if err != nil {
		return err
	}
	before, err := proxyMemory(pid, admin)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "loadbench: recording %d keys through the proxy\n", n)
	l := &loader{runID: randomID(), limit: n}
	smp, err := l.run(ctx, "http://"+addr, true, miss, conc, footprintTimeout)
	if err != nil {
		return err
	}
	if smp.requests != n {
		return fmt.Errorf("recorded %d keys in %s, want %d", smp.requests, footprintTimeout, n)
	}
	after, err := proxyMemory(pid, admin)
	if err != nil {
		return err
	}
	per := func(a, b int64) string {
		if a < 0 || b < 0 {
			return "?"
		}
		return fmt.Sprintf("%.1f MiB → %.1f MiB, %.0f B/record", float64(a)/(1<<20), float64(b)/(1<<20), float64(b-a)/float64(n))
	}
	fmt.Fprintf(stdout, "loadbench --footprint-proxy: %s, layout %s, proxy GOMAXPROCS %s; %d keys recorded through the proxy (miss scenario, %d clients, 199-byte responses) in %s\n",
		runtime.Version(), s.layout.name, proxyGOMAXPROCS(admin), n, conc, smp.elapsed.Round(time.Second))
	fmt.Fprintf(stdout, "  %s\n", proxyConfig(s.stderrPipe))
	fmt.Fprintf(stdout, "  proxy RSS:             %s\n", per(before.rss, after.rss))
	fmt.Fprintf(stdout, "  proxy heap allocated:  %s (live records and garbage not yet collected)\n", per(before.heap, after.heap))
	if before.storeBytes >= 0 && after.storeBytes >= 0 {
		fmt.Fprintf(stdout, "  store's own account:   %s\n", per(before.storeBytes, after.storeBytes))
	}
	return nil
}

// memFigures are what proxyMemory reads; -1 where unknown.
type memFigures struct{ rss, heap, storeBytes int64 }

// proxyMemory reads the proxy's RSS from /proc and its heap (and the memory
// store's size, where the proxy exports it) from its metrics.
func proxyMemory(pid int, admin string) (memFigures, error) {
	m := memFigures{rss: rssOf(pid), heap: -1, storeBytes: -1}
	body, err := get("http://" + admin + "/metrics")
	if err != nil {
		return m, err
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_memstats_heap_alloc_bytes":
			m.heap = int64(v)
		case "idempotency_proxy_store_bytes":
			m.storeBytes = int64(v)
		}
	}
	return m, nil
}

// rssOf returns a process's resident set size in bytes, -1 if unknown.
func rssOf(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	return parseVmRSS(string(b))
}

// parseVmRSS reads VmRSS from the text of /proc/PID/status.
func parseVmRSS(status string) int64 {
	for line := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return -1
			}
			return kb << 10
		}
	}
	return -1
}
