//go:build linux

package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// A cell more than 3% above its committed count fails the run, naming it;
// one within 3%, or below, passes; one the baseline lacks is shown, not
// failed.
func TestInstructionBaselineFailsACellMoreThanThreePercentAbove(t *testing.T) {
	base, err := readInstrBaseline(strings.NewReader(`# a comment
plain no-key 100000
memory no-key 102000   # raised for the access log
memory hit 50000
`))
	if err != nil {
		t.Fatal(err)
	}
	r := instrReport{
		targets: []string{"plain", "memory", "redis"},
		scens:   []scenario{noKey, hit},
		counts: map[string]map[scenario]float64{
			"plain":  {noKey: 102_900},             // +2.9%
			"memory": {noKey: 90_000, hit: 51_600}, // below; +3.2%
			"redis":  {noKey: 500_000},             // no baseline
		},
	}
	var out bytes.Buffer
	err = base.check(r, &out)
	if err == nil || !strings.Contains(err.Error(), "memory hit +3.2%") || strings.Contains(err.Error(), "plain") || strings.Contains(err.Error(), "redis") {
		t.Errorf("check: %v; want only memory hit named, 3.2%% above", err)
	}
	if !strings.Contains(out.String(), "no baseline") || !strings.Contains(out.String(), "ABOVE") {
		t.Errorf("the table does not show the cell without a baseline and the one above it:\n%s", out.String())
	}
	r.counts["memory"][hit] = 51_400 // +2.8%
	if err := base.check(r, &out); err != nil {
		t.Errorf("every cell within 3%%: %v", err)
	}
}

// A cell may rise as many instructions a request above its tolerance as
// its reference (the plain proxy for a forwarded request, the floor for a
// replay) rose above its own baseline, at most 5% of that baseline; the
// references themselves are never failed, and a reference that fell gives
// no allowance.
func TestInstructionBaselineForgivesTheHostsDriftNotTheProducts(t *testing.T) {
	base, err := readInstrBaseline(strings.NewReader(`plain no-key 100000
plain hit 100000
floor hit 50000
memory no-key 100000
memory hit 80000
memory-shadow hit 200000
`))
	if err != nil {
		t.Fatal(err)
	}
	r := instrReport{
		targets:     []string{"plain", "memory", "memory-shadow", "floor"},
		scens:       []scenario{noKey, hit},
		forwardsAll: map[string]bool{"memory-shadow": true},
		counts: map[string]map[scenario]float64{
			"plain":         {noKey: 106_000, hit: 101_000}, // +6%: the host's, capped at 5K
			"floor":         {hit: 51_000},                  // +1K
			"memory":        {noKey: 107_900, hit: 83_300},  // 3K + 4.9K; 2.4K + 0.9K
			"memory-shadow": {hit: 206_900},                 // 6K + 0.9K
		},
	}
	var out bytes.Buffer
	if err := base.check(r, &out); err != nil {
		t.Errorf("every cell within its tolerance and its reference's drift: %v\n%s", err, out.String())
	}
	for _, c := range []struct {
		target string
		scen   scenario
		n      float64
	}{
		{"memory", noKey, 108_100}, // the drift is capped at 5% of plain's 100K
		{"memory", hit, 83_500},    // the floor's drift, not plain's
		{"memory-shadow", hit, 207_100},
	} {
		prev := r.counts[c.target][c.scen]
		r.counts[c.target][c.scen] = c.n
		if err := base.check(r, &out); err == nil || !strings.Contains(err.Error(), c.target+" "+c.scen.String()) {
			t.Errorf("%s %s at %.0f: check = %v; want it named", c.target, c.scen, c.n, err)
		}
		r.counts[c.target][c.scen] = prev
	}
	r.counts["plain"][noKey] = 95_000 // a reference that fell gives no allowance
	r.counts["memory"][noKey] = 103_100
	if err := base.check(r, &out); err == nil || !strings.Contains(err.Error(), "memory no-key") {
		t.Errorf("plain fell, memory no-key +3.1%%: check = %v; want it named", err)
	}
}

// What --write-baseline writes, --baseline reads back.
func TestInstructionBaselineRoundTrips(t *testing.T) {
	r := instrReport{
		targets: []string{"plain", "floor"},
		scens:   []scenario{noKey, miss, hit},
		counts:  map[string]map[scenario]float64{"plain": {noKey: 140_492.5, miss: 144_314, hit: 147_040}, "floor": {hit: 53_600}},
	}
	var b bytes.Buffer
	if err := writeInstrBaseline(r, &b); err != nil {
		t.Fatal(err)
	}
	got, err := readInstrBaseline(&b)
	if err != nil {
		t.Fatal(err)
	}
	if got["plain"][noKey] != 140_492 && got["plain"][noKey] != 140_493 || got["floor"][hit] != 53_600 || len(got) != 2 || len(got["plain"]) != 3 {
		t.Errorf("read back %v", got)
	}
}

// The committed baseline reads, and covers every cell CI's quick count has.
func TestCommittedInstructionBaselineCoversEveryCountedCell(t *testing.T) {
	f, err := os.Open("../instructions-baseline.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	base, err := readInstrBaseline(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		target string
		scens  []scenario
	}{{"plain", countedScenarios}, {"memory", countedScenarios}, {"redis", countedScenarios}, {"floor", []scenario{hit}}} {
		for _, s := range tc.scens {
			if _, ok := base[tc.target][s]; !ok {
				t.Errorf("the baseline has no line for %s %s", tc.target, s)
			}
		}
	}
}

func TestInstructionBaselineRefusesBadLines(t *testing.T) {
	for _, in := range []string{"plain no-key", "plain sideways 100", "plain hit -5", "plain hit many"} {
		if _, err := readInstrBaseline(strings.NewReader(in + "\n")); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: error %v, want one naming line 1", in, err)
		}
	}
}
