package execution

import (
	"context"
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
			var o Owners
			o.Init()
			cancelled := make([]int, 3)
			chans := make([]chan struct{}, 3)
			for i := range chans {
				chans[i] = o.Add("k", func(error) { cancelled[i]++ })
			}
			running := map[int]bool{0: true, 1: true, 2: true}
			for _, i := range order {
				o.Remove("k", chans[i])
				delete(running, i)
				clear(cancelled)
				o.CancelAll()
				latest := -1
				for j := range chans {
					if want := map[bool]int{true: 1}[running[j]]; cancelled[j] != want {
						t.Fatalf("after call %d settled, a shutdown cancelled call %d %d times, want %d", i, j, cancelled[j], want)
					}
					if running[j] {
						latest = j
					}
				}
				got := o.Done("k")
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

// Two owners of one key in this process (the first lost its lease and the
// key was taken again): removing either leaves the other reachable, and
// Abort cancels both.
func TestOwnersSameKeyTwice(t *testing.T) {
	for _, firstOut := range []bool{true, false} {
		var o Owners
		o.Init()
		ctx1, cancel1 := context.WithCancelCause(context.Background())
		ctx2, cancel2 := context.WithCancelCause(context.Background())
		a := o.Add("k", cancel1)
		b := o.Add("k", cancel2)
		if got := o.Done("k"); got != b {
			t.Fatal("done does not follow the newest owner")
		}
		if firstOut {
			o.Remove("k", a)
			if got := o.Done("k"); got != b {
				t.Fatal("removing the first owner lost the second")
			}
		} else {
			o.Remove("k", b)
			if got := o.Done("k"); got != a {
				t.Fatal("removing the second owner lost the first")
			}
		}
		o.CancelAll()
		if firstOut && ctx2.Err() == nil || !firstOut && ctx1.Err() == nil {
			t.Fatal("Abort missed an owner")
		}
		cancel1(nil)
		cancel2(nil)
	}
	var o Owners
	o.Init()
	ctx1, cancel1 := context.WithCancelCause(context.Background())
	ctx2, cancel2 := context.WithCancelCause(context.Background())
	o.Add("k", cancel1)
	o.Add("k", cancel2)
	o.CancelAll()
	if ctx1.Err() == nil || ctx2.Err() == nil {
		t.Fatal("Abort missed an owner of a key owned twice")
	}
}
