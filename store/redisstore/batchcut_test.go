package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// cmdsNamed makes one PING per name, each failed with an error of its
// name, so that whose answer a caller gets can be told.
func cmdsNamed(names ...string) []redis.Cmder {
	cmds := make([]redis.Cmder, len(names))
	for i, n := range names {
		cmds[i] = redis.NewStatusCmd(context.Background(), "ping")
		cmds[i].SetErr(errors.New(n))
	}
	return cmds
}

// TestDroppingExpiredCommandsKeepsTheOthersInOrder checks what a batch
// whose commands are past their deadline becomes as it is sent: those
// fail unsent and leave the queue, the others go on in their order with
// their deadlines, an acknowledged one keeps its acknowledgement at its
// new place, and a batch with none expired goes as it is.
func TestDroppingExpiredCommandsKeepsTheOthersInOrder(t *testing.T) {
	past, future := -time.Hour, time.Hour
	b := &batcher{epoch: time.Now()}

	bt := newBatch()
	bt.cmds = cmdsNamed("a", "b", "c", "d")
	bt.dls = []time.Duration{past, future, past, future}
	bt.acked = []ackedCmd{{i: 1, key: "b"}, {i: 2, key: "c"}}
	b.queued.Store(4)
	next := b.dropExpired(bt)
	if next == nil {
		t.Fatal("a batch with two commands within their deadline: nothing left to send")
	}
	if got, want := fmt.Sprint(next.cmds), fmt.Sprint([]redis.Cmder{bt.cmds[1], bt.cmds[3]}); got != want {
		t.Errorf("commands left to send = %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(next.dls), fmt.Sprint([]time.Duration{future, future}); got != want {
		t.Errorf("their deadlines = %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(next.acked), fmt.Sprint([]ackedCmd{{i: 0, key: "b"}}); got != want {
		t.Errorf("acknowledged commands left = %s, want %s", got, want)
	}
	for _, i := range []int{0, 2} {
		if err := bt.cmds[i].Err(); !errors.Is(err, errQueuedTooLong) {
			t.Errorf("command %d, past its deadline: %v, want %v", i, err, errQueuedTooLong)
		}
	}
	if q := b.queued.Load(); q != 2 {
		t.Errorf("%d commands counted as queued, want the 2 left to send", q)
	}
	if bt.next != next {
		t.Error("the batch does not lead its callers to the commands sent on")
	}
	select {
	case <-bt.done:
	default:
		t.Error("the callers of the commands that failed are not answered")
	}

	all := newBatch()
	all.cmds = cmdsNamed("a", "b")
	all.dls = []time.Duration{past, past}
	b.queued.Store(2)
	if next := b.dropExpired(all); next != nil {
		t.Errorf("a batch of expired commands left %d to send", len(next.cmds))
	}
	if q := b.queued.Load(); q != 0 {
		t.Errorf("%d commands counted as queued once all failed, want 0", q)
	}

	none := newBatch()
	none.cmds = cmdsNamed("a", "b")
	none.dls = []time.Duration{future, future}
	b.queued.Store(2)
	if next := b.dropExpired(none); next != none {
		t.Error("a batch with no command past its deadline is not sent as it is")
	}
	if q := b.queued.Load(); q != 2 {
		t.Errorf("%d commands counted as queued, want the 2 of the batch", q)
	}
	select {
	case <-none.done:
		t.Error("a batch with no command past its deadline answered its callers before it was sent")
	default:
	}
}

// TestCallerOfABatchCutShortGetsItsOwnAnswer checks that each caller of a
// batch whose expired commands failed unsent gets its own command's
// answer: the failure for one due by the cut, its deadline equal to the
// cut included, and for the others the command sent on, found at its new
// place after the ones before it that went on too.
func TestCallerOfABatchCutShortGetsItsOwnAnswer(t *testing.T) {
	const cut = time.Minute
	bt := newBatch()
	bt.cmds = cmdsNamed("past", "due at the cut", "kept", "due at the cut too", "kept too")
	bt.dls = []time.Duration{cut - time.Second, cut, cut + time.Second, cut, cut + time.Second}
	next := newBatch()
	next.cmds = []redis.Cmder{bt.cmds[2], bt.cmds[4]}
	next.dls = []time.Duration{cut + time.Second, cut + time.Second}
	bt.next, bt.cut = next, cut
	close(bt.done)
	close(next.done)

	b := &batcher{}
	for i, want := range []struct {
		bt  *batch
		i   int
		err string
	}{
		{bt, 0, "past"},
		{bt, 1, "due at the cut"},
		{next, 0, "kept"},
		{bt, 3, "due at the cut too"},
		{next, 1, "kept too"},
	} {
		gotBt, gotI, err := b.await(context.Background(), queuedCmd{bt: bt, i: i})
		if err == nil || err.Error() != want.err || gotBt != want.bt || gotI != want.i {
			t.Errorf("caller of command %d: answered %v, at place %d of the %s batch; want %q at place %d of the %s",
				i, err, gotI, which(gotBt, bt), want.err, want.i, which(want.bt, bt))
		}
	}
}

func which(got, first *batch) string {
	if got == first {
		return "first"
	}
	return "next"
}
