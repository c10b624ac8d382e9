package lograte

import (
	"testing"
	"time"
)

// The first line of a burst is written, the rest of its period counted,
// and the first line after the period carries the count.
func TestOneLineAPeriodWithTheCountLeftOut(t *testing.T) {
	l := New(10 * time.Second)
	t0 := time.Unix(1_700_000_000, 0)
	if ok, n := l.Allow(t0); !ok || n != 0 {
		t.Fatalf("first line: ok %v, suppressed %d; want written, none left out", ok, n)
	}
	for i := range 99 {
		if ok, _ := l.Allow(t0.Add(time.Duration(i) * 100 * time.Millisecond)); ok {
			t.Fatalf("line %d within the period was written", i+1)
		}
	}
	if ok, n := l.Allow(t0.Add(10 * time.Second)); !ok || n != 99 {
		t.Fatalf("after the period: ok %v, suppressed %d; want written with 99 left out", ok, n)
	}
	if ok, _ := l.Allow(t0.Add(15 * time.Second)); ok {
		t.Error("a line within the new period was written")
	}
	if ok, n := l.Allow(t0.Add(time.Hour)); !ok || n != 1 {
		t.Errorf("a line long after: ok %v, suppressed %d; want written with 1 left out", ok, n)
	}
}
