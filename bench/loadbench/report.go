//go:build linux

package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// round is what one run of one scenario against one target measured.
type round struct {
	rate      float64 // requests per second
	p50, p99  time.Duration
	cpu       float64 // proxy CPU µs per request
	storeCPU  float64 // redis-server's or postgres's CPU µs per request; NaN without one
	upCPU     float64 // the upstream's CPU µs per request
	clientCPU float64 // the load generator's CPU µs per request
	rateX     float64 // rate / the plain proxy's rate around it (withRatios)
	cpuX      float64 // cpu / the plain proxy's cpu around it
	steal     float64 // share of the machine's CPU time stolen meanwhile; 0 where unknown
}

// tail is how far the slowest 1% of a round's requests lag its median:
// p99/p50. Queueing behind other work on the CPU shows here first.
func (r round) tail() float64 {
	if r.p50 <= 0 {
		return math.NaN()
	}
	return float64(r.p99) / float64(r.p50)
}

// cellKey names one row of the table.
type cellKey struct {
	conc   int
	scen   scenario
	target string
}

// goal is a target for one row, judged on medians over the rounds: the
// throughput ratio to the plain proxy at least minRateX, and where set, the
// CPU ratio at most maxCPUX, p99/p50 at most maxTail, and exactly trips
// store round trips per request. A sidecar shares a small CPU allowance with
// the service it protects, so the targets are meant for --layout pinned.
type goal struct {
	minRateX float64
	maxCPUX  float64 // NaN: no requirement
	maxTail  float64 // NaN: no requirement
	trips    float64 // NaN: no requirement
}

var none = math.NaN()

// goals are set against the stock baseline (serve.go): a proxy doing more
// than forwarding pays for it in throughput on the forwarded paths, and
// earns it back on replays. The idempotency tax (writeTax) has no goal
// here: it is read against the peers' in the same run.
var goals = map[[2]string]goal{
	{"memory", "miss"}:   {0.90, none, none, none},
	{"memory", "hit"}:    {4.8, none, none, none},
	{"memory", "no-key"}: {1.00, none, none, none},
	{"redis", "miss"}:    {0.70, none, 3, 2},
	{"redis", "hit"}:     {3.2, none, 3, 1},
	{"redis", "no-key"}:  {1.00, none, none, 0},
	// The durable stores pay a commit per write, shared by the writes of
	// concurrent requests (postgres: a batch's round trip and WAL flush;
	// file: one bbolt commit, with fsync its fdatasync).
	{"postgres", "miss"}:   {0.35, none, none, none},
	{"postgres", "hit"}:    {1.5, none, none, none},
	{"file", "miss"}:       {0.55, none, none, none},
	{"file", "hit"}:        {3.5, none, none, none},
	{"file-fsync", "miss"}: {0.25, none, none, none},
}

// met reports whether medians of a row meet g.
func (g goal) met(rateX, cpuX, tail, trips float64) bool {
	return rateX >= g.minRateX &&
		(math.IsNaN(g.maxCPUX) || cpuX <= g.maxCPUX) &&
		(math.IsNaN(g.maxTail) || tail <= g.maxTail) &&
		(math.IsNaN(g.trips) || trips == g.trips)
}

// stat is a median with its spread over the rounds.
type stat struct{ med, lo, hi float64 }

func summarize(xs []float64) stat {
	s := slices.Clone(xs)
	s = slices.DeleteFunc(s, math.IsNaN)
	if len(s) == 0 {
		return stat{math.NaN(), math.NaN(), math.NaN()}
	}
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return stat{med, s[0], s[n-1]}
}

func field(rs []round, f func(round) float64) stat {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	return summarize(xs)
}

// percentile returns the p-th percentile (0 < p ≤ 1) of ds, which it sorts.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(p*float64(len(ds)))) - 1
	return ds[max(i, 0)]
}

// report is everything a run measured.
type report struct {
	concs   []int
	targets []string
	rounds  map[cellKey][]round
	// drift is, for each cell of the plain proxy, how far its throughput
	// moved across each target it bracketed (bracketDrift); empty when
	// the run did not bracket.
	drift map[cellKey][]float64
	// unsteady counts the measurements left out because the host moved
	// across them (steady.go).
	unsteady unsteadyCounts
	trips    map[scenario]float64 // Redis commands per request, by scenario
	direct   []time.Duration      // unloaded p50 going direct to the upstream, per round
	hitP50   []time.Duration      // unloaded p50 of a memory-store replay, per round
	quick    bool                 // a --quick run: two short rounds, figures that are noise
}

// write prints the table. Targets are judged at the highest concurrency,
// the loaded case docs/performance.md's ratios describe; they never change the
// exit status.
func (rep *report) write(w io.Writer) {
	loaded := slices.Max(rep.concs)
	suspects := rep.baselineSuspects()
	for _, line := range suspects {
		fmt.Fprintln(w, line)
	}
	if len(suspects) > 0 {
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(tw, "conc\tscenario\ttarget\treq/s\tp50\tp99\tp99/p50\tproxy CPU µs/req\tdb CPU µs/req\tupstream CPU µs/req\tclient CPU µs/req\tstore RT/req\treq/s ratio\tCPU ratio\tgoal\tmet\t")
	for _, c := range rep.concs {
		for _, s := range scenarios {
			for _, t := range rep.targets {
				rs := rep.rounds[cellKey{c, s, t}]
				if len(rs) == 0 {
					continue
				}
				rate := field(rs, func(r round) float64 { return r.rate })
				p50 := field(rs, func(r round) float64 { return float64(r.p50) })
				p99 := field(rs, func(r round) float64 { return float64(r.p99) })
				tail := field(rs, round.tail)
				cpu := field(rs, func(r round) float64 { return r.cpu })
				storeCPU := field(rs, func(r round) float64 { return r.storeCPU })
				upCPU := field(rs, func(r round) float64 { return r.upCPU })
				clientCPU := field(rs, func(r round) float64 { return r.clientCPU })
				trips := rep.tripsOf(t, s)
				rateX, cpuX, goalText, met := "", "", "", ""
				if t != "plain" {
					rx := field(rs, func(r round) float64 { return r.rateX })
					rateX = fmt.Sprintf("%.2f× (%.2f–%.2f)", rx.med, rx.lo, rx.hi)
					cx := field(rs, func(r round) float64 { return r.cpuX })
					cpuX = fmt.Sprintf("%.2f× (%.2f–%.2f)", cx.med, cx.lo, cx.hi)
					if g, ok := goals[[2]string{t, s.String()}]; ok {
						goalText, met = g.text(), "—"
						if c == loaded {
							met = yesNo(g.met(rx.med, cx.med, tail.med, trips))
						}
						if s == noKey && rx.med > maxNoKeyRateX {
							met = "BASELINE?"
						}
					}
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%.0f (%.0f–%.0f)\t%s\t%s\t%s\t%.1f (%.1f–%.1f)\t%s\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%s\t\n",
					c, s, t, rate.med, rate.lo, rate.hi,
					fmtDur(p50.med), fmtDur(p99.med), fmtOpt(tail.med, "%.1f"),
					cpu.med, cpu.lo, cpu.hi, fmtOpt(storeCPU.med, "%.1f"), upCPU.med, clientCPU.med, fmtOpt(trips, "%.2f"),
					rateX, cpuX, goalText, met)
			}
		}
	}
	tw.Flush()
	if len(rep.unsteady) > 0 {
		fmt.Fprintln(w)
		rep.unsteady.write(w, rep.rounds)
	}
	rep.writeDrift(w)
	rep.writeTax(w)
	if len(rep.direct) > 0 {
		d := durStat(rep.direct)
		h := durStat(rep.hitP50)
		diff := time.Duration(h.med - d.med)
		fmt.Fprintf(w, "\nunloaded p50 (concurrency 1): direct to upstream %s (%s–%s), memory-store replay %s (%s–%s); replay − direct = %s, goal ≤ 100µs: %s\n",
			fmtDur(d.med), fmtDur(d.lo), fmtDur(d.hi), fmtDur(h.med), fmtDur(h.lo), fmtDur(h.hi),
			diff.Round(time.Microsecond), yesNo(diff <= 100*time.Microsecond))
	}
}

// maxNoKeyRateX is the most a product target's no-key throughput may exceed
// the plain proxy's before the baseline, not the product, is taken to be
// wrong: forwarding with strictly more work than the floor cannot be faster,
// and 2% is more than the rounds' medians drift apart on a quiet machine.
const maxNoKeyRateX = 1.02

// isProduct reports whether a target is an idempotency-proxy binary, as
// opposed to the plain proxy, the replay floor or a peer.
func isProduct(target string) bool {
	return strings.HasPrefix(target, "memory") || strings.HasPrefix(target, "redis") ||
		target == "postgres" || strings.HasPrefix(target, "file")
}

// baselineSuspects returns one loud line for each product target whose
// median no-key throughput beats the plain proxy's by more than
// maxNoKeyRateX, at any concurrency: such a ratio is not a win but a
// baseline that is not the floor, and every ratio in the table inherits it.
func (rep *report) baselineSuspects() []string {
	var out []string
	quickNote := ""
	if rep.quick {
		quickNote = " (or, in this --quick run of two short rounds, noise)"
	}
	for _, c := range rep.concs {
		for _, t := range rep.targets {
			rs := rep.rounds[cellKey{c, noKey, t}]
			if !isProduct(t) || len(rs) == 0 {
				continue
			}
			rx := field(rs, func(r round) float64 { return r.rateX })
			if rx.med > maxNoKeyRateX {
				note := quickNote
				// A ratio is uncertain by about half the drift across it:
				// past twice the margin, the margin is inside the noise.
				if d := rep.drift[cellKey{c, noKey, "plain"}]; note == "" && len(d) > 0 {
					if med := summarize(d).med; med > 2*(maxNoKeyRateX-1) {
						note = fmt.Sprintf(" (or noise: the plain proxy's throughput moved %.0f%% across a median target's no-key measurement in this run)", 100*med)
					}
				}
				out = append(out, fmt.Sprintf("BASELINE IS NOT THE FLOOR: %s forwards no-key traffic at %.2f× the plain proxy at concurrency %d (above %.2f×); "+
					"a proxy doing strictly more work cannot beat it, so the plain proxy is mistuned and every ratio below is inflated%s", t, rx.med, c, maxNoKeyRateX, note))
			}
		}
	}
	return out
}

// unsteadyDrift is the median bracket drift above which the report calls
// the host unsteady: on a quiet host the plain proxy's throughput moves a
// few percent across one target's measurement.
const unsteadyDrift = 0.10

// writeDrift prints, for each concurrency, how far the plain proxy's
// throughput moved across the targets it bracketed, scenario by scenario,
// and a loud line when it moved so far that no ratio is to be judged.
func (rep *report) writeDrift(w io.Writer) {
	for _, c := range rep.concs {
		var parts []string
		var all []float64
		for _, s := range scenarios {
			d := rep.drift[cellKey{c, s, "plain"}]
			if len(d) == 0 {
				continue
			}
			st := summarize(d)
			parts = append(parts, fmt.Sprintf("%s %.0f%% (worst %.0f%%)", s, 100*st.med, 100*st.hi))
			all = append(all, d...)
		}
		if len(parts) == 0 {
			continue
		}
		fmt.Fprintf(w, "\nbracket drift at concurrency %d, the plain proxy's throughput after each target against before it (median): %s\n", c, strings.Join(parts, ", "))
		if med := summarize(all).med; med > unsteadyDrift && !rep.quick {
			fmt.Fprintf(w, "UNSTEADY HOST: at concurrency %d the plain proxy's throughput moved %.0f%% across a median target's measurement (above %.0f%%): the host's speed changed within seconds, and the ratios and the tax are not to be judged\n",
				c, 100*med, 100*unsteadyDrift)
		}
	}
}

// writeTax prints the idempotency tax of every target that has no-key
// rows: the proxy CPU per request a scenario costs above the same target's
// own no-key request, medians against medians. Stacks forward at different
// costs (Fiber's fasthttp at a fraction of net/http's), so the tax, not the
// throughput ratio, compares what the idempotency work itself costs. A
// store's own CPU (redis-server) is not in it; its column is in the table.
func (rep *report) writeTax(w io.Writer) {
	taxed := []scenario{miss, hit, mixed}
	type row struct {
		conc   int
		target string
		cells  []string
	}
	var rows []row
	for _, c := range rep.concs {
		for _, t := range rep.targets {
			base := rep.rounds[cellKey{c, noKey, t}]
			if t == "plain" || len(base) == 0 {
				continue
			}
			noKeyCPU := field(base, func(r round) float64 { return r.cpu }).med
			r := row{conc: c, target: t}
			for _, s := range taxed {
				rs := rep.rounds[cellKey{c, s, t}]
				if len(rs) == 0 {
					r.cells = append(r.cells, "–")
					continue
				}
				cpu := field(rs, func(r round) float64 { return r.cpu }).med
				r.cells = append(r.cells, fmt.Sprintf("%+.1f", cpu-noKeyCPU))
			}
			r.cells = append(r.cells, fmt.Sprintf("%.1f", noKeyCPU))
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\nidempotency tax: proxy CPU µs/req above the same target's no-key request (medians)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	head := "conc\ttarget"
	for _, s := range taxed {
		head += "\t" + s.String()
	}
	fmt.Fprintln(tw, head+"\tno-key CPU µs/req\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t\n", r.conc, r.target, strings.Join(r.cells, "\t"))
	}
	tw.Flush()
}

// tripsOf returns the store round trips per request: measured for Redis,
// zero by construction for the in-process store and the plain proxy.
func (rep *report) tripsOf(target string, s scenario) float64 {
	if target != "redis" {
		return math.NaN()
	}
	if v, ok := rep.trips[s]; ok {
		return v
	}
	return math.NaN()
}

func (g goal) text() string {
	s := fmt.Sprintf("≥ %.2f×", g.minRateX)
	if !math.IsNaN(g.maxCPUX) {
		s += fmt.Sprintf(", CPU ≤ %.2f×", g.maxCPUX)
	}
	if !math.IsNaN(g.maxTail) {
		s += fmt.Sprintf(", p99 ≤ %g×p50", g.maxTail)
	}
	if !math.IsNaN(g.trips) {
		s += fmt.Sprintf(", %g RT", g.trips)
	}
	return s
}

func durStat(ds []time.Duration) stat {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d)
	}
	return summarize(xs)
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}

func fmtOpt(v float64, format string) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf(format, v)
}

// fmtDur prints a duration in µs below 10 ms, in ms above.
func fmtDur(ns float64) string {
	if math.IsNaN(ns) {
		return "–"
	}
	d := time.Duration(ns)
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%dµs", d.Microseconds())
	}
	return fmt.Sprintf("%.1fms", float64(d)/1e6)
}
