package proxy

import (
	"testing"
)

// A key this process executes more than once at a time (its lease expired
// while a call ran and a retry took it again) keeps each call until that
// call settles, in whatever order they do: a shutdown cancels exactly the
// calls still running, waiters watch the latest one, and once all settle
// the key is no longer owned here.
func TestOwnersKeepEachRunningCallUntilItSettles(t *testing.T) {
	for name, order := range map[string][]int{
		"newest first":        {2, 1, 0},
		"oldest first":        {0, 1, 2},
		"middle first":        {1, 2, 0},
		"middle, then oldest": {1, 0, 2},
	} {
		t.Run(name, func(t *testing.T) {
			var o owners
			o.init()
			cancelled := make([]int, 3)
			chans := make([]chan struct{}, 3)
			for i := range chans {
				chans[i] = o.add("k", func() { cancelled[i]++ })
			}
			running := map[int]bool{0: true, 1: true, 2: true}
			for _, i := range order {
				o.remove("k", chans[i])
				delete(running, i)
				clear(cancelled)
				o.cancelAll()
				latest := -1
				for j := range chans {
					if want := map[bool]int{true: 1}[running[j]]; cancelled[j] != want {
						t.Fatalf("after call %d settled, a shutdown cancelled call %d %d times, want %d", i, j, cancelled[j], want)
					}
					if running[j] {
						latest = j
					}
				}
				got := o.done("k")
				switch {
				case latest < 0 && got != nil:
					t.Fatalf("every call settled, yet the key is still owned here")
				case latest >= 0 && got != (<-chan struct{})(chans[latest]):
					t.Fatalf("after call %d settled, waiters do not watch call %d, the latest still running", i, latest)
				}
			}
		})
	}
}
