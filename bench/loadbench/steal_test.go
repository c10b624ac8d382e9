//go:build linux

package main

import "testing"

func TestStolenShareIsStealOverAllCPUTime(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice: guest
	// time is in user already and must not count twice.
	before, err := parseCPUTicks("cpu  100 0 50 800 10 0 20 20 999 999\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseCPUTicks("cpu  200 0 100 1500 10 0 40 150 999 999\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
	if err != nil {
		t.Fatal(err)
	}
	if before.total != 1000 || before.steal != 20 {
		t.Errorf("before = %+v, want total 1000, steal 20", before)
	}
	// 1000 ticks later, 130 of them stolen.
	if got, want := stolenBetween(before, after), "13%"; got != want {
		t.Errorf("stolenBetween = %q, want %q", got, want)
	}
}

func TestStolenShareUnknownWhereStatSaysNothing(t *testing.T) {
	for _, s := range []string{"", "intr 1 2 3\n", "cpu 1 2 x 4 5 6 7 8\n"} {
		if _, err := parseCPUTicks(s); err == nil {
			t.Errorf("parseCPUTicks(%q): no error", s)
		}
	}
	// An old kernel without the steal field: none stolen.
	old, err := parseCPUTicks("cpu 10 0 10 80\n")
	if err != nil || old.steal != 0 || old.total != 100 {
		t.Errorf("parseCPUTicks(4 fields) = %+v, %v; want total 100, steal 0", old, err)
	}
	same := cpuTicks{total: 100, steal: 5}
	if got := stolenBetween(same, same); got != "?" {
		t.Errorf("stolenBetween over no time = %q, want ?", got)
	}
	if got := stolenSince(cpuTicks{}, false); got != "?" {
		t.Errorf("stolenSince without a first reading = %q, want ?", got)
	}
}

// /proc is always there where this file builds: a reading of this machine
// must succeed.
func TestReadCPUTicksOfThisMachine(t *testing.T) {
	if t0, ok := readCPUTicks(); !ok || t0.total == 0 {
		t.Errorf("readCPUTicks = %+v, %v; want a reading", t0, ok)
	}
}
