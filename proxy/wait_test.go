package proxy

import (
	"context"
	"testing"
)

// Two owners of one key in this process (the first lost its lease and the
// key was taken again): removing either leaves the other reachable, and
// Abort cancels both.
func TestOwnersSameKeyTwice(t *testing.T) {
	for _, firstOut := range []bool{true, false} {
		var o owners
		o.init()
		ctx1, cancel1 := context.WithCancel(context.Background())
		ctx2, cancel2 := context.WithCancel(context.Background())
		a := o.add("k", cancel1)
		b := o.add("k", cancel2)
		if got := o.done("k"); got != b {
			t.Fatal("done does not follow the newest owner")
		}
		if firstOut {
			o.remove("k", a)
			if got := o.done("k"); got != b {
				t.Fatal("removing the first owner lost the second")
			}
		} else {
			o.remove("k", b)
			if got := o.done("k"); got != a {
				t.Fatal("removing the second owner lost the first")
			}
		}
		o.cancelAll()
		if firstOut && ctx2.Err() == nil || !firstOut && ctx1.Err() == nil {
			t.Fatal("Abort missed an owner")
		}
		cancel1()
		cancel2()
	}
	var o owners
	o.init()
	ctx1, cancel1 := context.WithCancel(context.Background())
	ctx2, cancel2 := context.WithCancel(context.Background())
	o.add("k", cancel1)
	o.add("k", cancel2)
	o.cancelAll()
	if ctx1.Err() == nil || ctx2.Err() == nil {
		t.Fatal("Abort missed an owner of a key owned twice")
	}
}
