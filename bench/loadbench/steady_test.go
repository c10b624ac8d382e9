//go:build linux

package main

import (
	"bytes"
	"strings"
	"testing"
)

// scripted measures each target by handing out its next scripted round.
func scripted(t *testing.T, script map[string][]round) func(target) (round, error) {
	return func(tg target) (round, error) {
		rs := script[tg.name]
		if len(rs) == 0 {
			t.Fatalf("%s measured more often than scripted", tg.name)
		}
		script[tg.name] = rs[1:]
		return rs[0], nil
	}
}

// A target the host moved across — the plain proxy's throughput 30% apart
// around it, or a tenth of the CPU stolen — is measured again with the
// plain proxy after it; the steady attempt is kept, the other is not.
func TestUnsteadyMeasurementIsRepeatedNotReported(t *testing.T) {
	plain, memory := target{name: "plain"}, target{name: "memory"}
	order := []target{plain, memory, plain}
	for _, tc := range []struct {
		name   string
		plains []round
		mems   []round
	}{
		{"floor moved", []round{{rate: 1000}, {rate: 1300}, {rate: 1290}}, []round{{rate: 4000}, {rate: 4100}}},
		{"CPU stolen", []round{{rate: 1000}, {rate: 1000}, {rate: 1000}}, []round{{rate: 4000, steal: 0.10}, {rate: 4100}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ord, res, what, err := measureRound(order, true, maxRemeasures, scripted(t, map[string][]round{"plain": tc.plains, "memory": tc.mems}))
			if err != nil {
				t.Fatal(err)
			}
			if len(ord) != 5 {
				t.Fatalf("%d measurements, want 5: plain, memory, plain, memory again, plain", len(ord))
			}
			if what[1] != superseded || what[3] != kept {
				t.Errorf("first memory measurement %v, second %v; want superseded, then kept", what[1], what[3])
			}
			kept := withRatios(ord, res)[3]
			if kept.rate != 4100 || kept.rateX != 4100.0/((res[2].rate+res[4].rate)/2) {
				t.Errorf("kept %+v, want the second measurement, its ratio to the plain proxy just around it", kept)
			}
		})
	}
}

// A host that never holds still costs 1+maxRemeasures attempts, no more,
// and the last is left out of the table, which says so loudly.
func TestMeasurementUnsteadyEveryTimeIsLeftOutAndSaidSo(t *testing.T) {
	plain, memory := target{name: "plain"}, target{name: "memory"}
	plains := []round{{rate: 1000}}
	var mems []round
	for i := range 1 + maxRemeasures {
		plains = append(plains, round{rate: 1000 * float64(2+i%2)}) // 1000, 2000, 3000, 2000: every bracket moves
		mems = append(mems, round{rate: 4000})
	}
	ord, _, what, err := measureRound([]target{plain, memory, plain}, true, maxRemeasures, scripted(t, map[string][]round{"plain": plains, "memory": mems}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(ord); n != 1+2*(1+maxRemeasures) {
		t.Fatalf("%d measurements, want %d", n, 1+2*(1+maxRemeasures))
	}
	if what[len(what)-2] != unsteady {
		t.Errorf("the last attempt is %v, want unsteady", what[len(what)-2])
	}
	rep := &report{concs: []int{32}, targets: []string{"plain", "memory"}, rounds: map[cellKey][]round{
		{32, hit, "plain"}: {{rate: 1000, rateX: 1, cpuX: 1}},
	}, unsteady: unsteadyCounts{{32, hit, "memory"}: 1}}
	var b bytes.Buffer
	rep.write(&b)
	if !strings.Contains(b.String(), "UNSTEADY MEASUREMENT: memory hit at concurrency 32") || !strings.Contains(b.String(), "not reported") {
		t.Errorf("the report does not say the cell was left out:\n%s", b.String())
	}
	if strings.Contains(b.String(), "4000") {
		t.Errorf("the unsteady measurement reached the table:\n%s", b.String())
	}
}

// A steady host costs nothing more: one measurement a target.
func TestSteadyRoundIsMeasuredOnce(t *testing.T) {
	plain, a, b := target{name: "plain"}, target{name: "memory"}, target{name: "redis"}
	ord, _, what, err := measureRound([]target{plain, a, plain, b, plain}, true, maxRemeasures, scripted(t, map[string][]round{
		"plain": {{rate: 1000}, {rate: 1020}, {rate: 990}}, "memory": {{rate: 4000}}, "redis": {{rate: 3000}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(ord) != 5 || what[1] != kept || what[3] != kept {
		t.Errorf("%d measurements (%v), want 5, all kept", len(ord), what)
	}
}
