// Package gctune keeps the garbage collector's heap goal from falling below
// a minimum.
//
// A proxy's live heap is small: connection buffers and the requests in
// flight, a few MiB. With Go's default GOGC of 100 the collector starts a
// cycle each time that much again has been allocated, which at tens of
// thousands of requests a second is many times a second; where the process
// has one CPU, every cycle's marking and write barriers come out of the
// requests being served, and the slowest of them wait behind it. A minimum
// heap goal trades a bounded amount of memory (the minimum) for far fewer
// cycles. Where the live heap is large — a memory store full of records —
// the goal is above the minimum anyway, and the collector runs as Go's
// default would.
package gctune

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// defaultPercent is Go's own GOGC.
const defaultPercent = 100

// runtimeHeapMinimum is the heap goal the runtime never goes below at GOGC
// 100; it scales with GOGC (4 MiB × GOGC/100), so a large GOGC raises it.
const runtimeHeapMinimum = 4 << 20

// Percent is the GOGC that puts the heap goal at goal bytes, never below
// Go's default of 100. The runtime sets its goal at live + (live + roots) ×
// GOGC/100, where roots are the stacks and globals it scans, and at no less
// than 4 MiB × GOGC/100.
func Percent(live, roots, goal uint64) int {
	if live == 0 || live >= goal {
		return defaultPercent
	}
	p := float64(goal-live) * 100 / float64(live+roots)
	p = min(p, float64(goal)*100/runtimeHeapMinimum, math.MaxInt32)
	return max(int(p), defaultPercent)
}

// tuner resets GOGC after each collection, from the live heap it left.
type tuner struct {
	min      uint64
	onChange func(percent int)

	mu      sync.Mutex
	stopped bool
	percent int // the GOGC set last; 0 before the first
	sample  []metrics.Sample
}

// KeepHeapGoal sets GOGC after every collection so that the next heap goal
// is at least min bytes (see Percent). onChange, if not nil, is called with
// each new GOGC, from the goroutine that runs cleanups; it must not block.
// The returned stop ends the tuning and restores GOGC 100.
//
// It replaces whatever GOGC the process had: callers leave it alone when
// the operator set GOGC. A memory limit (GOMEMLIMIT) still applies, and
// makes the collector run earlier when the heap approaches it.
func KeepHeapGoal(min uint64, onChange func(percent int)) (stop func()) {
	t := &tuner{
		min:      min,
		onChange: onChange,
		sample: []metrics.Sample{
			{Name: "/gc/heap/live:bytes"},
			{Name: "/gc/scan/stack:bytes"},
			{Name: "/gc/scan/globals:bytes"},
		},
	}
	t.adjust()
	t.arm()
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.stopped = true
		debug.SetGCPercent(defaultPercent)
	}
}

// sentinel is a heap object nothing refers to: its cleanup runs after the
// first collection that finds it unreachable, which is the next one. It is
// larger than the tiny allocator's 16-byte blocks, whose objects may be
// kept alive by their neighbours.
type sentinel struct{ _ [32]byte }

// arm sets a cleanup to run after the next collection, which adjusts GOGC
// and arms the next one.
func (t *tuner) arm() {
	runtime.AddCleanup(new(sentinel), func(t *tuner) {
		if t.adjust() {
			t.arm()
		}
	}, t)
}

// adjust sets GOGC for the live heap the last collection left; it reports
// false once stopped.
func (t *tuner) adjust() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	metrics.Read(t.sample)
	var v [3]uint64 // live heap, stacks, globals
	for i, s := range t.sample {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	if v[0] == 0 { // no collection has run yet
		return true
	}
	p := Percent(v[0], v[1]+v[2], t.min)
	if p == t.percent {
		return true
	}
	debug.SetGCPercent(p)
	t.percent = p
	if t.onChange != nil {
		t.onChange(p)
	}
	return true
}
