//go:build linux

package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// A target's measurement between two of the plain proxy is kept only when
// the host held still across the three: the plain proxy's throughput
// after it within unsteadyDrift of before it, and no more than maxSteal of
// the machine's CPU time stolen by the hypervisor during any of them.
// Otherwise the target and the plain proxy after it are measured again,
// up to maxRemeasures times; a measurement still unsteady then is left out
// of the table, and the report says how many were (writeUnsteady). A ratio
// from a host that moved under it is not a figure to judge a build by.

// maxSteal is the share of CPU time stolen during a measurement above
// which it is not kept.
const maxSteal = 0.05

// maxRemeasures bounds the measurements of one target in one round to
// 1+maxRemeasures, so an unsteady host lengthens a run by a bounded factor.
const maxRemeasures = 2

// measured is what became of one measurement of a round.
type measured int

const (
	kept       measured = iota
	superseded          // measured again: the host moved across it
	unsteady            // the host moved across every attempt: left out
)

// steadyAround reports whether the host held still across a target's
// measurement t between the plain proxy's before and after.
func steadyAround(before, t, after round) bool {
	drift := math.Abs(before.rate-after.rate) / ((before.rate + after.rate) / 2)
	return drift <= unsteadyDrift && max(before.steal, t.steal, after.steal) <= maxSteal
}

// measureRound measures order's targets in turn with m. Where the plain
// proxy brackets a target (bracket), a measurement the host moved across
// is repeated, at most remeasures times, with the plain proxy after it,
// so that each attempt is bracketed by the plain proxy just before and
// just after; with remeasures 0 (--quick, whose figures are noise anyway)
// every measurement is kept. It returns every measurement made, in the
// order made, and what became of each.
func measureRound(order []target, bracket bool, remeasures int, m func(target) (round, error)) ([]target, []round, []measured, error) {
	var ord []target
	var res []round
	var what []measured
	add := func(t target) error {
		r, err := m(t)
		if err != nil {
			return err
		}
		ord, res, what = append(ord, t), append(res, r), append(what, kept)
		return nil
	}
	if !bracket {
		for _, t := range order {
			if err := add(t); err != nil {
				return nil, nil, nil, err
			}
		}
		return ord, res, what, nil
	}
	if err := add(order[0]); err != nil {
		return nil, nil, nil, err
	}
	for i := 1; i+1 < len(order); i += 2 {
		for attempt := 0; ; attempt++ {
			if err := add(order[i]); err != nil {
				return nil, nil, nil, err
			}
			if err := add(order[i+1]); err != nil {
				return nil, nil, nil, err
			}
			j := len(res) - 2
			if remeasures == 0 || steadyAround(res[j-1], res[j], res[j+1]) {
				break
			}
			if attempt == remeasures {
				what[j] = unsteady
				break
			}
			what[j] = superseded
		}
	}
	return ord, res, what, nil
}

// keptDrift is bracketDrift over the kept measurements only.
func keptDrift(order []target, results []round, what []measured) []float64 {
	var out []float64
	for i := range order {
		if bracketedAt(order, i) && what[i] == kept {
			a, b := results[i-1].rate, results[i+1].rate
			out = append(out, math.Abs(a-b)/((a+b)/2))
		}
	}
	return out
}

// unsteadyCounts is, for each cell, how many of its measurements were
// left out as unsteady.
type unsteadyCounts map[cellKey]int

// write says which cells lost measurements to an unsteady host, loudly:
// their figures rest on fewer rounds, or are not in the table at all.
func (u unsteadyCounts) write(w io.Writer, rounds map[cellKey][]round) {
	keys := make([]cellKey, 0, len(u))
	for k := range u {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b cellKey) int {
		return cmp.Or(cmp.Compare(a.conc, b.conc), cmp.Compare(a.scen, b.scen), strings.Compare(a.target, b.target))
	})
	for _, k := range keys {
		left := "its figures rest on the rounds that were steady"
		if len(rounds[k]) == 0 {
			left = "no steady round is left: the cell is not reported"
		}
		fmt.Fprintf(w, "UNSTEADY MEASUREMENT: %s %s at concurrency %d: %d measurement(s) left out after %d attempts each, the plain proxy having moved more than %.0f%% across it or the hypervisor having stolen more than %.0f%% of the CPU; %s\n",
			k.target, k.scen, k.conc, u[k], 1+maxRemeasures, 100*unsteadyDrift, 100*maxSteal, left)
	}
}
