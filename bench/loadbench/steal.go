//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// A virtual machine's CPUs can be taken by the hypervisor for other guests:
// that time is the "steal" of /proc/stat. While it comes and goes, the
// same work takes longer from one second to the next, and every ratio of
// the run moves with it. The report prints the share stolen during the
// run beside the load average, so a reader sees why a run is unsteady.

// cpuTicks is the machine's CPU time so far, from the first line of
// /proc/stat, in ticks.
type cpuTicks struct {
	total, steal uint64
}

// readCPUTicks reads /proc/stat; ok is false where it cannot.
func readCPUTicks() (cpuTicks, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTicks{}, false
	}
	t, err := parseCPUTicks(string(b))
	return t, err == nil
}

// parseCPUTicks reads the "cpu" line of /proc/stat: user, nice, system,
// idle, iowait, irq, softirq and steal (proc(5)). Guest time is already
// counted in user and nice, so the fields after steal are left out.
// Kernels before 2.6.11 had no steal field: it counts as none.
func parseCPUTicks(s string) (cpuTicks, error) {
	line, _, _ := strings.Cut(s, "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return cpuTicks{}, errors.New("no cpu line first in /proc/stat")
	}
	var t cpuTicks
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return cpuTicks{}, fmt.Errorf("/proc/stat cpu field %d: %w", i+1, err)
		}
		t.total += n
		if i == 7 {
			t.steal = n
		}
	}
	return t, nil
}

// stolenSince is the share of the machine's CPU time stolen since before,
// as a percentage, or "?" when it cannot be read.
func stolenSince(before cpuTicks, ok bool) string {
	after, ok2 := readCPUTicks()
	if !ok || !ok2 {
		return "?"
	}
	return stolenBetween(before, after)
}

func stolenBetween(before, after cpuTicks) string {
	if after.total <= before.total || after.steal < before.steal {
		return "?"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(after.steal-before.steal)/float64(after.total-before.total))
}

// stealSince is the share of the machine's CPU time stolen since before,
// as a fraction; 0 when it cannot be read.
func stealSince(before cpuTicks, ok bool) float64 {
	after, ok2 := readCPUTicks()
	if !ok || !ok2 || after.total <= before.total || after.steal < before.steal {
		return 0
	}
	return float64(after.steal-before.steal) / float64(after.total-before.total)
}
