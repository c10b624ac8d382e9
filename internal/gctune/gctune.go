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
	"time"
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

// recheckEvery is how often the tuner works GOGC out again whatever the
// cleanups reported (see arm): it bounds how long a stale GOGC can pace
// the collector.
const recheckEvery = 100 * time.Millisecond

// tuner resets GOGC after each collection, from the live heap it left.
type tuner struct {
	goal     uint64
	onChange func(percent int)

	mu      sync.Mutex
	stopped bool
	percent int // the GOGC set last; 0 before the first
	sample  []metrics.Sample
}

// Metrics the tuner reads, in the order of tuner.sample.
const (
	sampleLive = iota
	sampleStacks
	sampleGlobals
)

func newTuner(goal uint64, onChange func(percent int)) *tuner {
	return &tuner{
		goal:     goal,
		onChange: onChange,
		sample: []metrics.Sample{
			sampleLive:    {Name: "/gc/heap/live:bytes"},
			sampleStacks:  {Name: "/gc/scan/stack:bytes"},
			sampleGlobals: {Name: "/gc/scan/globals:bytes"},
		},
	}
}

// KeepHeapGoal sets GOGC after every collection so that the next heap goal
// is at least goal bytes (see Percent). onChange, if not nil, is called
// with each new GOGC; it must not block. The returned stop ends the tuning
// and restores GOGC 100.
//
// It replaces whatever GOGC the process had: callers leave it alone when
// the operator set GOGC. A memory limit (GOMEMLIMIT) still applies, and
// makes the collector run earlier when the heap approaches it.
func KeepHeapGoal(goal uint64, onChange func(percent int)) (stop func()) {
	ticker := time.NewTicker(recheckEvery)
	stopTuning := start(goal, onChange, ticker.C, true)
	return func() {
		ticker.Stop()
		stopTuning()
	}
}

// start runs a tuner that works GOGC out now, after each collection when
// cleanups is set, and on each tick.
// The returned stop may be called more than once.
func start(goal uint64, onChange func(percent int), tick <-chan time.Time, cleanups bool) (stop func()) {
	t := newTuner(goal, onChange)
	t.adjust()
	if cleanups {
		t.arm()
	}
	done := make(chan struct{})
	go t.watch(tick, done)
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			t.mu.Lock()
			defer t.mu.Unlock()
			t.stopped = true
			debug.SetGCPercent(defaultPercent)
		})
	}
}

// sentinel is a heap object nothing refers to: its cleanup runs after the
// first collection that finds it unreachable. It is larger than the tiny
// allocator's 16-byte blocks, whose objects may be kept alive by their
// neighbours.
type sentinel struct{ _ [32]byte }

// arm sets a cleanup to run after the next collection, which adjusts GOGC
// and arms the next one. A sentinel allocated while a collection is
// marking survives that collection, so a cleanup can miss one; watch
// catches those.
func (t *tuner) arm() {
	runtime.AddCleanup(new(sentinel), func(t *tuner) {
		if t.adjust() {
			t.arm()
		}
	}, t)
}

// watch works GOGC out again on each tick, until done is closed: reading
// the live heap is cheap, and GOGC changes only when a collection left a
// different one.
func (t *tuner) watch(tick <-chan time.Time, done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case <-tick:
			t.adjust()
		}
	}
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
	var v [sampleGlobals + 1]uint64
	for i, s := range t.sample {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	if v[sampleLive] == 0 { // no collection has run yet
		return true
	}
	p := Percent(v[sampleLive], v[sampleStacks]+v[sampleGlobals], t.goal)
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
