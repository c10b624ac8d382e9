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

// changes returns an onChange that reports each new GOGC on the channel.
func changes() (func(int), chan int) {
	ch := make(chan int, 64)
	return func(p int) {
		select {
		case ch <- p:
		default:
		}
	}, ch
}

func next(t *testing.T, ch chan int, what string) int {
	t.Helper()
	select {
	case p := <-ch:
		return p
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no GOGC set within 10s", what)
		return 0
	}
}

func TestKeepHeapGoalSetsGOGCAfterEachCollectionUntilStopped(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	const goal = 256 * mib
	onChange, changed := changes()
	stop := KeepHeapGoal(goal, onChange)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})
	runtime.GC()
	p := next(t, changed, "after a collection")
	if p <= 100 {
		t.Fatalf("GOGC set to %d with a live heap far below the goal, want above 100", p)
	}
	if got := gogc(); got != uint64(p) {
		t.Errorf("runtime GOGC %d, want %d as set", got, p)
	}
	// The runtime's goal is now near goal: raised, and not past it.
	if g := readMetric("/gc/heap/goal:bytes"); g > goal || g < goal/2 {
		t.Errorf("heap goal %d MiB with GOGC %d, want at most %d MiB and near it", g/mib, p, goal/mib)
	}
	// Tuning goes on: with more live heap, the next collection lowers GOGC.
	keep := make([]byte, 64*mib)
	runtime.GC()
	if p2 := next(t, changed, "after a second collection"); p2 >= p {
		t.Errorf("GOGC %d with 64 MiB more live heap, want below %d", p2, p)
	}
	runtime.KeepAlive(keep)

	stop()
	stopped = true
	if got := gogc(); got != 100 {
		t.Errorf("GOGC %d after stop, want 100", got)
	}
	runtime.GC()
	runtime.GC()
	if got := gogc(); got != 100 {
		t.Errorf("GOGC %d after stop and collections, want 100", got)
	}
}

// A cleanup armed while a collection is marking misses that collection;
// the next tick after a collection nobody reported works GOGC out again.
func TestATickCatchesACollectionNoCleanupReported(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	onChange, changed := changes()
	tn := newTuner(256*mib, onChange)
	tick, done := make(chan time.Time), make(chan struct{})
	defer close(done)
	go tn.watch(tick, done)

	runtime.GC() // no cleanup is armed: only a tick can see it
	tick <- time.Now()
	if p := next(t, changed, "after a tick"); p <= 100 {
		t.Fatalf("GOGC %d, want above 100", p)
	}
	// With no collection since, a tick changes nothing.
	tn.mu.Lock()
	tn.percent = 1 // would be replaced by any adjustment
	tn.mu.Unlock()
	before := readMetric("/gc/cycles/total:gc-cycles")
	tick <- time.Now()
	tick <- time.Now() // the first tick has been handled once the second is taken
	tn.mu.Lock()
	p := tn.percent
	tn.mu.Unlock()
	if readMetric("/gc/cycles/total:gc-cycles") != before {
		t.Log("a collection ran meanwhile; nothing to conclude from the idle ticks")
	} else if p != 1 {
		t.Errorf("a tick with no collection since set GOGC %d", p)
	}
}
