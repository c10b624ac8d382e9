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

// check prints every counted cell against its baseline and returns an
// error naming the cells more than instrTolerance above theirs. A cell
// the baseline has no line for is shown, never failed.
func (b instrBaseline) check(r instrReport, w io.Writer) error {
	fmt.Fprintf(w, "\nagainst the baseline (a cell fails more than %.0f%% above it)\n", instrTolerance*100)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tscenario\tbaseline\tcounted\tchange\t\t")
	var over []string
	for _, t := range r.targets {
		for _, s := range r.scens {
			n, ok := r.counts[t][s]
			if !ok {
				continue
			}
			base, ok := b[t][s]
			if !ok {
				fmt.Fprintf(tw, "%s\t%s\t–\t%.1fK\t\tno baseline\t\n", t, s, n/1000)
				continue
			}
			verdict := ""
			if b.above(t, s, n) {
				verdict = "ABOVE"
				over = append(over, fmt.Sprintf("%s %s %+.1f%%", t, s, (n/base-1)*100))
			}
			fmt.Fprintf(tw, "%s\t%s\t%.1fK\t%.1fK\t%+.1f%%\t%s\t\n", t, s, base/1000, n/1000, (n/base-1)*100, verdict)
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
