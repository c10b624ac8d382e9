//go:build linux

package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// The instruction baseline is the committed count of every cell
// (bench/instructions-baseline.txt): --baseline FILE compares a run with it
// and fails when a cell rose more than instrTolerance above its line, so a
// change that makes a path dearer is seen in the commit that makes it. A
// cell above it is counted a second time, and the lower count stands.
// Raising a line is a deliberate edit of the file, in the commit that pays
// for something, saying what (the file's comments hold the history);
// --write-baseline FILE writes a run's counts in the file's format.

// instrTolerance is how far above its baseline a cell may count before
// the run fails: counts repeat within about 1% from run to run and host
// to host (docs/performance.md, Instructions per request).
const instrTolerance = 0.03

// instrBaseline is target → scenario → instructions a request.
type instrBaseline map[string]map[scenario]float64

// readInstrBaseline reads "target scenario instructions" lines; # starts
// a comment.
func readInstrBaseline(r io.Reader) (instrBaseline, error) {
	b := instrBaseline{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 {
			return nil, fmt.Errorf("line %d: %q: want target, scenario and instructions", n, sc.Text())
		}
		i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.String() == f[1] })
		if i < 0 {
			return nil, fmt.Errorf("line %d: unknown scenario %q", n, f[1])
		}
		count, err := strconv.ParseFloat(f[2], 64)
		if err != nil || count <= 0 {
			return nil, fmt.Errorf("line %d: instructions %q: want a positive number", n, f[2])
		}
		if b[f[0]] == nil {
			b[f[0]] = map[scenario]float64{}
		}
		b[f[0]][scenarios[i]] = count
	}
	return b, sc.Err()
}

func loadInstrBaseline(path string) (instrBaseline, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--baseline: %w", err)
	}
	defer f.Close()
	b, err := readInstrBaseline(f)
	if err != nil {
		return nil, fmt.Errorf("--baseline %s: %w", path, err)
	}
	return b, nil
}

// above reports whether n, target's count of scen, is more than
// instrTolerance above its baseline line; false without one.
func (b instrBaseline) above(target string, scen scenario, n float64) bool {
	base, ok := b[target][scen]
	return ok && n > base*(1+instrTolerance)
}

// maxHostDrift bounds the allowance hostDrift gives a cell: a fraction of
// its reference's baseline.
const maxHostDrift = 0.05

// The host moves every cell by about the same number of instructions a
// request: what a request costs in Go's scheduler between requests
// (finding no work, polling the network, spinning before it sleeps)
// depends on when the kernel hands the next bytes over, not on the
// request. Two runs of one build on a shared host: the plain proxy's
// no-key request 137.0K and 140.3K, the product's 143.2K and 146.8K; of
// the 3.3K each rose, all was runtime.findRunnable, stealWork, netpoll and
// the scheduler's locks, the same functions in both processes. The plain
// proxy and the replay floor are the benchmark's own code, which no change
// to the product moves, so what they rose above their baselines is the
// host's, and a cell may rise as much on top of its tolerance: the plain
// proxy's count of the same scenario for a forwarded request, the floor's
// for a replay (one wait a request where a forwarded one has two).

// referenceOf is the cell whose rise above its baseline is the host's
// drift for target's count of scen; "" for the references themselves.
func referenceOf(r instrReport, target string, scen scenario) string {
	switch {
	case target == "plain" || target == "floor":
		return ""
	case scen == hit && !r.forwardsAll[target]:
		return "floor"
	}
	return "plain"
}

// hostDrift is how many instructions a request the reference of target's
// scen cell rose above its baseline in r, at most maxHostDrift of that
// baseline; 0 when it did not rise or was not counted.
func (b instrBaseline) hostDrift(r instrReport, target string, scen scenario) float64 {
	ref := referenceOf(r, target, scen)
	if ref == "" {
		return 0
	}
	s := scen
	if ref == "floor" {
		s = hit
	}
	now, ok := r.counts[ref][s]
	base, okBase := b[ref][s]
	if !ok || !okBase {
		return 0
	}
	return min(max(0, now-base), base*maxHostDrift)
}

// check prints every counted cell against its baseline and returns an
// error naming the cells more than instrTolerance above theirs, beyond the
// host's drift (hostDrift). The plain proxy and the floor are shown, never
// failed: the product does not move them. A cell the baseline has no line
// for is shown, never failed.
func (b instrBaseline) check(r instrReport, w io.Writer) error {
	fmt.Fprintf(w, "\nagainst the baseline (a cell fails more than %.0f%% above it)\n", instrTolerance*100)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tscenario\tbaseline\tcounted\tchange\thost drift\t\t")
	var over []string
	for _, t := range r.targets {
		for _, s := range r.scens {
			n, ok := r.counts[t][s]
			if !ok {
				continue
			}
			base, ok := b[t][s]
			if !ok {
				fmt.Fprintf(tw, "%s\t%s\t–\t%.1fK\t\t\tno baseline\t\n", t, s, n/1000)
				continue
			}
			verdict, drift := "", b.hostDrift(r, t, s)
			switch {
			case referenceOf(r, t, s) == "":
				verdict = "reference"
			case b.above(t, s, n-drift):
				verdict = "ABOVE"
				over = append(over, fmt.Sprintf("%s %s %+.1f%% (host drift %.1fK)", t, s, (n/base-1)*100, drift/1000))
			}
			fmt.Fprintf(tw, "%s\t%s\t%.1fK\t%.1fK\t%+.1f%%\t%.1fK\t%s\t\n", t, s, base/1000, n/1000, (n/base-1)*100, drift/1000, verdict)
		}
	}
	tw.Flush()
	if len(over) > 0 {
		return fmt.Errorf("instruction counts more than %.0f%% above the baseline: %s", instrTolerance*100, strings.Join(over, ", "))
	}
	return nil
}

// writeInstrBaseline writes r's counts in the baseline's format.
func writeInstrBaseline(r instrReport, w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "# target scenario instructions-a-request (go -C bench run ./loadbench --instructions --write-baseline)")
	for _, t := range r.targets {
		for _, s := range r.scens {
			if n, ok := r.counts[t][s]; ok {
				fmt.Fprintf(bw, "%s %s %.0f\n", t, s, n)
			}
		}
	}
	return bw.Flush()
}
