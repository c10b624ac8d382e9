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

// until waits for a GOGC set on ch that satisfies ok, for at most 10s.
func until(t *testing.T, ch chan int, what string, ok func(int) bool) int {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case p := <-ch:
			if ok(p) {
				return p
			}
		case <-deadline:
			t.Fatalf("%s: not within 10s", what)
			return 0
		}
	}
}

func TestKeepHeapGoalSetsGOGCAfterEachCollectionUntilStopped(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	runtime.GC() // what earlier tests left behind is collected first
	runtime.GC()
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
	p := until(t, changed, "GOGC raised for a live heap far below the goal", func(p int) bool { return p > 100 })
	if got := gogc(); got <= 100 {
		t.Errorf("runtime GOGC %d, want above 100 as set", got)
	}
	// The runtime's goal is now near goal: raised, and not past it.
	if g := readMetric("/gc/heap/goal:bytes"); g > goal || g < goal/2 {
		t.Errorf("heap goal %d MiB with GOGC %d, want at most %d MiB and near it", g/mib, gogc(), goal/mib)
	}
	// Tuning goes on: with more live heap, a later collection lowers GOGC.
	keep := make([]byte, 64*mib)
	runtime.GC() // a collection the allocation itself started may not count it
	runtime.GC()
	until(t, changed, "GOGC lowered for 64 MiB more live heap", func(q int) bool { return q < p })
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
	runtime.GC() // what earlier tests left behind is collected first
	onChange, changed := changes()
	tick := make(chan time.Time)
	// No cleanups: only a tick can see a collection.
	stop := start(256*mib, onChange, tick, false)
	defer stop()
	// start works GOGC out at once from what the collections so far left;
	// take that value, if any, before the collection the tick must see,
	// which leaves a heap 64 MiB larger and so calls for another GOGC.
	select {
	case <-changed:
	default:
	}
	keep := make([]byte, 64*mib)
	runtime.GC() // a collection the allocation itself started may not count it
	runtime.GC()
	send := func() {
		select {
		case tick <- time.Now():
		case <-time.After(10 * time.Second):
			t.Fatal("the tuner takes no ticks")
		}
	}
	send()
	send() // the first tick has been handled once the second is taken
	select {
	case p := <-changed:
		if p <= 100 {
			t.Errorf("GOGC %d with 64 MiB live and a 256 MiB goal, want above 100", p)
		}
	default:
		t.Fatal("no GOGC set after a collection and a tick")
	}
	runtime.KeepAlive(keep)
	tn := func() int { return int(readMetric("/gc/gogc:percent")) }
	stop()
	stop() // twice is harmless
	if p := tn(); p != 100 {
		t.Errorf("GOGC %d after stop, want 100", p)
	}
}
