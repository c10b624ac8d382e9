package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Unless the operator sets GOGC, the proxy keeps the collector's heap goal
// at minHeapGoal, so that its small live heap is not collected many times
// a second under load; an operator's GOGC is left to the runtime.
func TestCollectorKeepsAMinimumHeapGoalUnlessGOGCIsSet(t *testing.T) {
	metric := func(p *proc, name string) float64 {
		v, err := strconv.ParseFloat(p.metric(t, name), 64)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return v
	}
	t.Run("GOGC unset", func(t *testing.T) {
		if v, ok := os.LookupEnv("GOGC"); ok {
			t.Skipf("the test's own environment sets GOGC=%s, which the proxy inherits", v)
		}
		p := start(t, nil, "--upstream", "http://127.0.0.1:1")
		// Every scrape allocates: collections run, and the first one that
		// finishes sets GOGC for the heap goal.
		waitFor(t, "GOGC raised after a collection", func() bool { return metric(p, "go_gc_gogc_percent") > 100 })
		if goal := metric(p, "go_memstats_next_gc_bytes"); goal < minHeapGoal/2 || goal > minHeapGoal {
			t.Errorf("heap goal %.1f MiB, want at most %d MiB and near it", goal/(1<<20), minHeapGoal>>20)
		}
		if want := fmt.Sprintf(`"gc":"min_heap_goal=%dMiB"`, minHeapGoal>>20); !strings.Contains(p.logs.String(), want) {
			t.Errorf("start log does not say %s:\n%s", want, p.logs.String())
		}
	})
	t.Run("GOGC set", func(t *testing.T) {
		p := start(t, []string{"GOGC=150"}, "--upstream", "http://127.0.0.1:1")
		for range 50 {
			if got := metric(p, "go_gc_gogc_percent"); got != 150 {
				t.Fatalf("GOGC %v, want the operator's 150", got)
			}
		}
		if gcs := metric(p, "go_gc_duration_seconds_count"); gcs == 0 {
			t.Errorf("no collection ran during 50 scrapes: the check proved nothing")
		}
		if want := `"gc":"GOGC=150"`; !strings.Contains(p.logs.String(), want) {
			t.Errorf("start log does not say %s:\n%s", want, p.logs.String())
		}
	})
}
