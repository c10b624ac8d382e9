//go:build linux

package main

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
)

func names(ts []target) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.name
	}
	return out
}

// TestBracketedRoundMeasuresThePlainProxyAroundEveryTarget: with bracket,
// every other target stands between two measurements of the plain proxy,
// in an order reversed every other round, and a target that does not serve
// the scenario (the floor on a miss) is left out; without, every target
// once, the whole order reversed every other round, as before.
func TestBracketedRoundMeasuresThePlainProxyAroundEveryTarget(t *testing.T) {
	targets := []target{{name: "plain"}, {name: "memory"}, {name: "redis"}, {name: "floor"}}
	cases := []struct {
		scen    scenario
		round   int
		bracket bool
		want    []string
	}{
		{hit, 0, true, []string{"plain", "memory", "plain", "redis", "plain", "floor", "plain"}},
		{hit, 1, true, []string{"plain", "floor", "plain", "redis", "plain", "memory", "plain"}},
		{miss, 0, true, []string{"plain", "memory", "plain", "redis", "plain"}},
		{hit, 0, false, []string{"plain", "memory", "redis", "floor"}},
		{miss, 1, false, []string{"redis", "memory", "plain"}},
	}
	for _, c := range cases {
		if got := names(roundOrder(targets, c.scen, c.round, c.bracket)); !slices.Equal(got, c.want) {
			t.Errorf("%s, round %d, bracket %v: order %v, want %v", c.scen, c.round, c.bracket, got, c.want)
		}
	}
}

// TestBracketedRatioIsToThePlainProxyJustBeforeAndAfter: a target measured
// while the host slowed is compared with the plain proxy measured around
// it, not with the plain proxy's first measurement of the round.
func TestBracketedRatioIsToThePlainProxyJustBeforeAndAfter(t *testing.T) {
	order := []target{{name: "plain"}, {name: "memory"}, {name: "plain"}, {name: "redis"}, {name: "plain"}}
	results := []round{
		{rate: 1000, cpu: 50},
		{rate: 900, cpu: 60},
		{rate: 800, cpu: 40},
		{rate: 300, cpu: 200}, // the host at under two thirds of its speed from here
		{rate: 500, cpu: 100},
	}
	got := withRatios(order, results)
	if math.Abs(got[1].rateX-1) > 1e-9 || math.Abs(got[1].cpuX-60.0/45) > 1e-9 {
		t.Errorf("memory: ratios %.3f, %.3f, want 1 (900 against 900), 1.333 (60 against 45)", got[1].rateX, got[1].cpuX)
	}
	if math.Abs(got[3].rateX-300.0/650) > 1e-9 || math.Abs(got[3].cpuX-200.0/70) > 1e-9 {
		t.Errorf("redis: ratios %.3f, %.3f, want 0.462 (300 against 650), 2.857 (200 against 70)", got[3].rateX, got[3].cpuX)
	}
	for _, i := range []int{0, 2, 4} {
		if got[i].rateX != 1 || got[i].cpuX != 1 {
			t.Errorf("plain measurement %d: ratios %.2f, %.2f, want 1", i, got[i].rateX, got[i].cpuX)
		}
	}
	if results[1].rateX != 0 {
		t.Error("withRatios changed its input")
	}

	// Unbracketed, every target is compared with the round's one plain
	// measurement, wherever it stands.
	once := withRatios([]target{{name: "redis"}, {name: "plain"}}, []round{{rate: 300, cpu: 100}, {rate: 1000, cpu: 50}})
	if once[0].rateX != 0.3 || once[0].cpuX != 2 {
		t.Errorf("unbracketed redis: ratios %.2f, %.2f, want 0.3, 2", once[0].rateX, once[0].cpuX)
	}

	drift := bracketDrift(order, results)
	if len(drift) != 2 || math.Abs(drift[0]-200.0/900) > 1e-9 || math.Abs(drift[1]-300.0/650) > 1e-9 {
		t.Errorf("drift %v, want [0.222 0.462]: the plain proxy's rate moved from 1000 to 800 across memory, from 800 to 500 across redis", drift)
	}
}

// TestReportCallsAnUnsteadyHostUnsteady: the bracket drift is printed per
// scenario, and a median drift above unsteadyDrift gets a loud line saying
// that the ratios are not to be judged; a steady host gets none.
func TestReportCallsAnUnsteadyHostUnsteady(t *testing.T) {
	for _, tc := range []struct {
		drift []float64
		loud  bool
	}{
		{[]float64{0.01, 0.03, 0.05}, false},
		{[]float64{0.02, 0.03, 0.40}, false}, // one bad bracket is not an unsteady host
		{[]float64{0.05, 0.20, 0.40}, true},
	} {
		rep := &report{concs: []int{32}, targets: []string{"plain", "memory"},
			rounds: map[cellKey][]round{
				{32, hit, "plain"}:  {{rate: 1000, cpu: 50, rateX: 1, cpuX: 1}},
				{32, hit, "memory"}: {{rate: 4000, cpu: 16, rateX: 4, cpuX: 0.32}},
			},
			drift: map[cellKey][]float64{{32, hit, "plain"}: tc.drift},
		}
		var b bytes.Buffer
		rep.write(&b)
		s := b.String()
		if !strings.Contains(s, "bracket drift at concurrency 32") || !strings.Contains(s, "hit ") {
			t.Errorf("drift %v: no drift line for the hit scenario\n%s", tc.drift, s)
		}
		if got := strings.Contains(s, "UNSTEADY HOST"); got != tc.loud {
			t.Errorf("drift %v: UNSTEADY HOST printed %v, want %v\n%s", tc.drift, got, tc.loud, s)
		}
	}
}

// TestBaselineWarningSaysWhenTheHostMovedMoreThanItsMargin: a no-key ratio
// above the floor's margin is still reported loudly, but on a run whose
// plain proxy moved more across a target than twice that margin the line
// says it may be noise; on a steady run it does not.
func TestBaselineWarningSaysWhenTheHostMovedMoreThanItsMargin(t *testing.T) {
	for _, tc := range []struct {
		drift      float64
		mayBeNoise bool
	}{{0.02, false}, {0.08, true}} {
		rep := &report{concs: []int{32}, targets: []string{"plain", "memory"},
			rounds: map[cellKey][]round{
				{32, noKey, "plain"}:  {{rate: 1000, rateX: 1, cpuX: 1}},
				{32, noKey, "memory"}: {{rate: 1060, rateX: 1.06, cpuX: 0.95}},
			},
			drift: map[cellKey][]float64{{32, noKey, "plain"}: {tc.drift}},
		}
		var b bytes.Buffer
		rep.write(&b)
		s := b.String()
		if !strings.HasPrefix(s, "BASELINE IS NOT THE FLOOR: memory") {
			t.Fatalf("drift %.2f: want the baseline warning first\n%s", tc.drift, s)
		}
		if got := strings.Contains(s, "or noise: the plain proxy's throughput moved 8%"); got != tc.mayBeNoise {
			t.Errorf("drift %.2f: noise note %v, want %v\n%s", tc.drift, got, tc.mayBeNoise, s)
		}
	}
}
