//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The scaling run (--scaling) measures the Redis store's miss and hit
// against the plain proxy in two sweeps: response body sizes at
// scalingConc clients, and numbers of clients at the smallest body size.

// scalingConc is the number of clients of the body-size sweep: the loaded
// case of the main table.
const scalingConc = 32

// recordBudget bounds what one miss measurement may record in Redis: it
// ends after recordBudget/body requests if its time is not up first, and
// Redis is flushed before every measurement. Without it a few seconds of
// 1 MiB misses would hold gigabytes.
const recordBudget = 1 << 30

// maxScalingBody is the largest body the sweep takes: the largest the proxy
// records whole under its default max_response_body of 1 MiB, which counts
// the response's headers with its body (docs/guarantees.md); a larger one
// is replayed without its body. 4 KiB is room for the upstream's headers.
const maxScalingBody = 1<<20 - 4<<10

type scalingSettings struct {
	bodies []int // response body sizes in bytes, ascending
	concs  []int
}

// point is one configuration of the sweep.
type point struct{ body, conc int }

// points lists the sizes at scalingConc clients, then the numbers of
// clients at the smallest size, each once.
func (sc scalingSettings) points() []point {
	var ps []point
	for _, b := range sc.bodies {
		ps = append(ps, point{b, scalingConc})
	}
	for _, c := range sc.concs {
		if p := (point{sc.bodies[0], c}); !slices.Contains(ps, p) {
			ps = append(ps, p)
		}
	}
	return ps
}

func parseScaling(bodies, concs string) (scalingSettings, error) {
	var sc scalingSettings
	for f := range strings.SplitSeq(bodies, ",") {
		n, err := parseSize(strings.TrimSpace(f))
		if err != nil {
			return sc, fmt.Errorf("--bodies: %w", err)
		}
		if n < minSizedBody || n > maxScalingBody {
			return sc, fmt.Errorf("--bodies: %q: want %d bytes to %s (what the proxy records whole under its default max_response_body)", f, minSizedBody, fmtSize(maxScalingBody))
		}
		sc.bodies = append(sc.bodies, n)
	}
	slices.Sort(sc.bodies)
	var err error
	if sc.concs, err = parseConcs(concs); err != nil {
		return sc, fmt.Errorf("--scaling-concurrency: %w", err)
	}
	return sc, nil
}

// parseSize reads a byte count with an optional KiB or MiB suffix.
func parseSize(s string) (int, error) {
	mult := 1
	if v, ok := strings.CutSuffix(s, "KiB"); ok {
		s, mult = v, 1<<10
	} else if v, ok := strings.CutSuffix(s, "MiB"); ok {
		s, mult = v, 1<<20
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad size %q: want bytes, KiB or MiB", s)
	}
	return n * mult, nil
}

// scalingKey names one row of a scaling table.
type scalingKey struct {
	point
	scen   scenario
	target string
}

func benchScaling(ctx context.Context, s settings, sc scalingSettings, stdout, stderr io.Writer) (err error) {
	started, load := time.Now(), loadAverage()
	ticks, ticksOK := readCPUTicks()
	rg, err := setUp(ctx, s, slices.Max(sc.concs))
	defer rg.close()
	if err != nil {
		return err
	}
	plain, redis := rg.targets[0], rg.targets[2]
	rows := map[scalingKey][]round{}
	for _, p := range sc.points() {
		fmt.Fprintf(stderr, "loadbench: %s bodies, %d clients\n", fmtSize(p.body), p.conc)
		l := &loader{runID: randomID(), path: defaultPath + "?bytes=" + strconv.Itoa(p.body), bodyLen: p.body}
		if err := scalingRounds(ctx, l, rows, p, plain, redis, s); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "loadbench --scaling: %d CPUs, %s, %d rounds × %s per cell, a miss measurement ends after %d MiB of bodies, run took %s; load average %s before, %s after; %s of CPU time stolen by the hypervisor\n",
		runtime.NumCPU(), runtime.Version(), s.rounds, s.duration, recordBudget>>20, time.Since(started).Round(time.Second), load, loadAverage(), stolenSince(ticks, ticksOK))
	rg.describe(stdout)
	var bySize, byConc []point
	for _, p := range sc.points() {
		if p.conc == scalingConc {
			bySize = append(bySize, p)
		}
		if p.body == sc.bodies[0] && slices.Contains(sc.concs, p.conc) {
			byConc = append(byConc, p)
		}
	}
	fmt.Fprintf(stdout, "By response body size, %d clients:\n\n", scalingConc)
	writeScaling(stdout, rows, bySize)
	fmt.Fprintf(stdout, "\nBy concurrent clients, %s bodies:\n\n", fmtSize(sc.bodies[0]))
	writeScaling(stdout, rows, byConc)
	return nil
}

// scalingRounds measures miss and hit at p, plain and Redis in turn,
// reversing their order every other round. Redis is emptied before each of
// its measurements (and the hit keys recorded again), so the records of one
// do not pile up into the next.
func scalingRounds(ctx context.Context, l *loader, rows map[scalingKey][]round, p point, plain, redis target, s settings) error {
	prepare := func(t target, scen scenario) error {
		l.limit = 0
		if scen == miss {
			l.limit = max(recordBudget/p.body, p.conc)
		}
		if t.storeAddr == "" {
			return nil
		}
		if reply, err := redisCommand(t.storeAddr, "FLUSHALL"); err != nil || reply != "+OK" {
			return fmt.Errorf("FLUSHALL: %q %v", reply, err)
		}
		if scen == hit {
			return l.warmHits(ctx, t.base, t.isProxy)
		}
		return nil
	}
	for _, scen := range []scenario{miss, hit} {
		for _, t := range []target{plain, redis} {
			if err := prepare(t, scen); err != nil {
				return err
			}
			if _, err := l.run(ctx, t.base, t.isProxy, scen, p.conc, s.warmup); err != nil {
				return err
			}
		}
	}
	for r := range s.rounds {
		for _, scen := range []scenario{miss, hit} {
			order := []target{plain, redis}
			if r%2 == 1 {
				slices.Reverse(order)
			}
			byName := map[string]round{}
			for _, t := range order {
				if err := prepare(t, scen); err != nil {
					return err
				}
				res, err := measure(ctx, l, t, scen, p.conc, s.duration)
				if err != nil {
					return fmt.Errorf("%s bodies, %d clients: %w", fmtSize(p.body), p.conc, err)
				}
				byName[t.name] = res
			}
			base := byName[plain.name]
			for name, res := range byName {
				res.rateX, res.cpuX = res.rate/base.rate, res.cpu/base.cpu
				k := scalingKey{p, scen, name}
				rows[k] = append(rows[k], res)
			}
		}
	}
	return nil
}

// writeScaling prints the rows of points, medians over the rounds.
func writeScaling(w io.Writer, rows map[scalingKey][]round, points []point) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(tw, "body\tconc\tscenario\ttarget\treq/s\tp50\tp99\tp99/p50\tproxy CPU µs/req\tredis CPU µs/req\tupstream CPU µs/req\tclient CPU µs/req\treq/s ratio\tCPU ratio\t")
	for _, p := range points {
		for _, scen := range []scenario{miss, hit} {
			for _, t := range []string{"plain", "redis"} {
				rs := rows[scalingKey{p, scen, t}]
				if len(rs) == 0 {
					continue
				}
				rate := field(rs, func(r round) float64 { return r.rate })
				cpu := field(rs, func(r round) float64 { return r.cpu })
				rateX, cpuX := "", ""
				if t != "plain" {
					rx := field(rs, func(r round) float64 { return r.rateX })
					cx := field(rs, func(r round) float64 { return r.cpuX })
					rateX = fmt.Sprintf("%.2f× (%.2f–%.2f)", rx.med, rx.lo, rx.hi)
					cpuX = fmt.Sprintf("%.2f× (%.2f–%.2f)", cx.med, cx.lo, cx.hi)
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%.0f (%.0f–%.0f)\t%s\t%s\t%s\t%.1f (%.1f–%.1f)\t%s\t%.1f\t%.1f\t%s\t%s\t\n",
					fmtSize(p.body), p.conc, scen, t, rate.med, rate.lo, rate.hi,
					fmtDur(field(rs, func(r round) float64 { return float64(r.p50) }).med),
					fmtDur(field(rs, func(r round) float64 { return float64(r.p99) }).med),
					fmtOpt(field(rs, round.tail).med, "%.1f"),
					cpu.med, cpu.lo, cpu.hi,
					fmtOpt(field(rs, func(r round) float64 { return r.storeCPU }).med, "%.1f"),
					field(rs, func(r round) float64 { return r.upCPU }).med,
					field(rs, func(r round) float64 { return r.clientCPU }).med,
					rateX, cpuX)
			}
		}
	}
	tw.Flush()
}

// fmtSize prints a byte count as B, KiB or MiB when it divides evenly.
func fmtSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + " KiB"
	}
	return strconv.Itoa(n) + " B"
}
