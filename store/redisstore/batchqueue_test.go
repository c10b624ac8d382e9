package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// heldBatcher is the batcher of a store on miniredis with every pipeline
// connection's permit taken: what is queued stays queued until release.
func heldBatcher(t *testing.T) (b *batcher, release func()) {
	t.Helper()
	m := miniredis.RunT(t)
	s := newStore(t, Options{URL: "redis://" + m.Addr()})
	return s.batch, holdPipelines(t, s)
}

func ping() redis.Cmder { return redis.NewStatusCmd(context.Background(), "ping") }

// TestQueueHoldsExactlyMaxQueuedCommands checks the queue's bound to the
// command: the maxQueued-th command queues, the next is refused at once,
// and a refused command holds no place once refused.
func TestQueueHoldsExactlyMaxQueuedCommands(t *testing.T) {
	b, release := heldBatcher(t)
	ctx := context.Background()
	dl := time.Now().Add(time.Minute)
	// Stands for maxQueued-1 commands waiting for Redis.
	b.queued.Store(maxQueued - 1)
	q, err := b.enqueue(ping(), dl, "", false)
	if err != nil {
		t.Fatalf("command %d of a queue of %d: %v, want it queued", maxQueued, maxQueued, err)
	}
	for range 3 {
		if _, err := b.enqueue(ping(), dl, "", false); !errors.Is(err, errQueueFull) {
			t.Fatalf("a command past the queue's bound: %v, want %v", err, errQueueFull)
		}
	}
	release()
	if _, _, err := b.await(ctx, q); err != nil {
		t.Fatalf("the queued PING: %v", err)
	}
	if got := b.queued.Load(); got != maxQueued-1 {
		t.Errorf("%d commands counted as queued once the last was answered, want the %d standing before it: the refused ones hold a place",
			got, maxQueued-1)
	}
	b.queued.Store(0)
}

// TestCommandDueWithinTheSlackOfTheLatestIsInOrder checks where a command
// counts as late (one that arms a timer of its own, as it may queue behind
// batches due after it): due more than lateSlack before the latest
// deadline queued, and not at lateSlack exactly.
func TestCommandDueWithinTheSlackOfTheLatestIsInOrder(t *testing.T) {
	b, _ := heldBatcher(t)
	latest := time.Now().Add(time.Minute)
	for _, c := range []struct {
		dl   time.Time
		late bool
	}{
		{latest, false},
		{latest.Add(-lateSlack), false},
		{latest.Add(-lateSlack - time.Nanosecond), true},
		{latest.Add(time.Nanosecond), false},
	} {
		q, err := b.enqueue(ping(), c.dl, "", false)
		if err != nil {
			t.Fatalf("enqueue: %v", err)
		}
		if q.late != c.late {
			t.Errorf("a command due %v after the latest deadline queued: late = %v, want %v", c.dl.Sub(latest), q.late, c.late)
		}
	}
}
