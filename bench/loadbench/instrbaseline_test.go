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
