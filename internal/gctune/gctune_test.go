package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

const mib = 1 << 20

func TestPercentPutsTheGoalAtTheMinimum(t *testing.T) {
	tests := []struct {
		live, roots, goal uint64
		want              int
	}{
		{0, 0, 64 * mib, 100},              // nothing collected yet
		{1 * mib, 0, 64 * mib, 1600},       // 6300 would raise the runtime's own minimum past 64 MiB
		{4 * mib, 0, 64 * mib, 1500},       // 4 + 4 × 15 = 64
		{4 * mib, 4 * mib, 64 * mib, 750},  // 4 + 8 × 7.5 = 64
		{30 * mib, 2 * mib, 64 * mib, 106}, // 30 + 32 × 1.06 ≈ 64
		{32 * mib, 0, 64 * mib, 100},       // half the goal: Go's default
		{500 * mib, 0, 64 * mib, 100},      // a full memory store
		{63 * mib, 0, 64*mib + 1, 100},     // never below the default
		{10 * mib, 0, 0, 100},              // no goal
		{1, 0, 1 << 62, 1<<31 - 1},         // bounded
	}
	for _, tc := range tests {
		got := Percent(tc.live, tc.roots, tc.goal)
		if got != tc.want {
			t.Errorf("Percent(%d, %d, %d) = %d, want %d", tc.live, tc.roots, tc.goal, got, tc.want)
		}
		// Where it raises GOGC, neither of the runtime's goals passes goal.
		if got > 100 && got < 1<<31-1 {
			if g := tc.live + (tc.live+tc.roots)*uint64(got)/100; g > tc.goal {
				t.Errorf("Percent(%d, %d, %d) = %d puts the goal at %d, above %d", tc.live, tc.roots, tc.goal, got, g, tc.goal)
			}
			if m := runtimeHeapMinimum * uint64(got) / 100; m > tc.goal {
				t.Errorf("Percent(%d, %d, %d) = %d puts the runtime's minimum at %d, above %d", tc.live, tc.roots, tc.goal, got, m, tc.goal)
			}
		}
	}
}

// readMetric reads one of the runtime's uint64 metrics.
func readMetric(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func gogc() uint64 { return readMetric("/gc/gogc:percent") }

func TestKeepHeapGoalSetsGOGCAfterEachCollectionUntilStopped(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	changed := make(chan int, 16)
	const goal = 256 * mib
	stop := KeepHeapGoal(goal, func(p int) {
		select {
		case changed <- p:
		default:
		}
	})
	runtime.GC()
	var p int
	select {
	case p = <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no GOGC set within 10s of a collection")
	}
	if p <= 100 {
		t.Fatalf("GOGC set to %d with a live heap far below the minimum, want above 100", p)
	}
	if got := gogc(); got != uint64(p) {
		t.Errorf("runtime GOGC %d, want %d as set", got, p)
	}
	// The runtime's goal is now near goal: raised, and not past it.
	if g := readMetric("/gc/heap/goal:bytes"); g > goal || g < goal/2 {
		t.Errorf("heap goal %d MiB with GOGC %d, want at most %d MiB and near it", g/mib, p, goal/mib)
	}
	// Each collection arms the next: with more live heap, the next one
	// lowers GOGC.
	keep := make([]byte, 64*mib)
	runtime.GC()
	select {
	case p2 := <-changed:
		if p2 >= p {
			t.Errorf("GOGC %d with 64 MiB more live heap, want below %d", p2, p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("GOGC not set again within 10s of a second collection")
	}
	runtime.KeepAlive(keep)

	stop()
	if got := gogc(); got != 100 {
		t.Errorf("GOGC %d after stop, want 100", got)
	}
	runtime.GC()
	runtime.GC()
	if got := gogc(); got != 100 {
		t.Errorf("GOGC %d after stop and collections, want 100", got)
	}
}
