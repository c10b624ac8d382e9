package redisstore

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher writes the commands of concurrent callers to Redis as pipelines:
// one write, one wake-up of Redis and one read of the replies per batch
// instead of per command.
//
// A batch is what has queued by the time the flusher gets to run after
// yielding once (runtime.Gosched): the goroutines that were ready to run
// — request handlers about to send their own command — get their turn
// first. That is natural batching: a lone caller is flushed at once, and
// under load a batch holds what the load brought, with no timer and no
// guess of what will arrive. Where the process has a single CPU
// (GOMAXPROCS=1, a sidecar's case) it matters most: a flusher that is
// woken straight away sends one command per batch, and one that waits for
// more callers than are coming holds the early ones back (go-redis's
// auto-pipeliner waits for as many commands as the previous batch had,
// which over HTTP arrive one request at a time; measured in
// docs/performance.md).
//
// At most maxConcurrentBatches batches are in flight, each on a pipeline
// connection of its own; while they are, new commands queue and go out
// together in the next. A batch holds at most maxBatch commands: the
// replies of a batch share one read deadline, and a replay's reply is a
// whole record, so small batches keep what must arrive by then small.
type batcher struct {
	c       redis.UniversalClient
	timeout time.Duration

	mu     sync.Mutex
	cur    *batch   // filling
	full   []*batch // filled to maxBatch, waiting for the flusher
	closed bool

	wake    chan struct{} // a command was queued; capacity 1
	permits chan struct{} // one per batch in flight
	stop    chan struct{} // closed by close
	stopped chan struct{} // closed when the flusher has returned
	// queued counts the commands accepted and not yet answered, queued or
	// in flight: past maxQueued a command fails at once.
	queued atomic.Int64
}

// batch is a pipeline of commands; done is closed once each has its reply
// or its error.
type batch struct {
	cmds []redis.Cmder
	done chan struct{}
}

func newBatch() *batch {
	return &batch{cmds: make([]redis.Cmder, 0, 8), done: make(chan struct{})}
}

var errQueueFull = errors.New("too many commands queued for Redis")

func newBatcher(c redis.UniversalClient, timeout time.Duration) *batcher {
	b := &batcher{
		c:       c,
		timeout: timeout,
		cur:     newBatch(),
		wake:    make(chan struct{}, 1),
		permits: make(chan struct{}, maxConcurrentBatches),
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	go b.flusher()
	return b
}

// do queues cmd and waits until it has its reply or ctx is done. In the
// second case cmd must not be read; it still runs if it was sent.
func (b *batcher) do(ctx context.Context, cmd redis.Cmder) error {
	if b.queued.Add(1) > maxQueued {
		b.queued.Add(-1)
		return errQueueFull
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.queued.Add(-1)
		return redis.ErrClosed
	}
	bt := b.cur
	bt.cmds = append(bt.cmds, cmd)
	if len(bt.cmds) == maxBatch {
		b.full = append(b.full, bt)
		b.cur = newBatch()
	}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default: // the flusher is already due to run
	}
	select {
	case <-bt.done:
		return cmd.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flusher sends the queued commands, a batch at a time, until close.
func (b *batcher) flusher() {
	defer close(b.stopped)
	for {
		select {
		case <-b.wake:
		case <-b.stop:
			b.drain()
			return
		}
		for {
			select {
			case b.permits <- struct{}{}:
			case <-b.stop:
				b.drain()
				return
			}
			// Let the goroutines that are ready to run queue their commands.
			runtime.Gosched()
			bt := b.take()
			if bt == nil {
				<-b.permits
				break
			}
			go b.send(bt)
		}
	}
}

// take returns the next batch to send, or nil when nothing is queued.
func (b *batcher) take() *batch {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.full) > 0 {
		bt := b.full[0]
		b.full[0] = nil
		b.full = b.full[1:]
		return bt
	}
	if len(b.cur.cmds) == 0 {
		return nil
	}
	bt := b.cur
	b.cur = newBatch()
	return bt
}

// send runs bt as one pipeline, bounded by the store's timeout, and
// releases its permit.
func (b *batcher) send(bt *batch) {
	defer func() { <-b.permits }()
	b.exec(bt)
}

func (b *batcher) exec(bt *batch) {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	_, err := b.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, cmd := range bt.cmds {
			_ = p.Process(ctx, cmd)
		}
		return nil
	})
	// Each command has its own reply or error, and Pipelined's error is
	// the first of those — except when the pipeline never ran: a
	// connection that could not be made ready (a wrong password, a
	// database out of range) leaves the commands untouched.
	if err != nil && !slices.ContainsFunc(bt.cmds, func(c redis.Cmder) bool { return c.Err() == err }) {
		for _, cmd := range bt.cmds {
			if cmd.Err() == nil {
				cmd.SetErr(err)
			}
		}
	}
	b.queued.Add(-int64(len(bt.cmds)))
	close(bt.done)
}

// drain sends what is still queued, once the store is closing: its
// callers get an answer or the closed client's error rather than waiting
// for their timeout.
func (b *batcher) drain() {
	for bt := b.take(); bt != nil; bt = b.take() {
		b.exec(bt)
	}
}

// close stops the flusher after it has sent what is queued; later
// commands fail at once.
func (b *batcher) close() {
	b.mu.Lock()
	already := b.closed
	b.closed = true
	b.mu.Unlock()
	if !already {
		close(b.stop)
	}
	<-b.stopped
}
