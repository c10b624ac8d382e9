package redisstore

import (
	"context"
	"errors"
	"fmt"
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
//
// Each command carries its operation's deadline (begun + timeout), and a
// batch runs until the earliest deadline of its commands, under one
// context for the whole batch: the caller waits for its batch and its own
// context, with no timer of its own. Commands queue in the order their
// operations began, so a batch in flight ends by the deadline of every
// command queued behind it; a command whose deadline passed while it
// queued (every pipeline connection held by batches Redis had not
// answered) fails without being sent, and the rest of its batch goes on
// without it. An operation's later command (a lease given back, a script
// sent again by its source, a look after an out-of-memory refusal) keeps
// the deadline of the operation's start, earlier than those of commands
// queued meanwhile: it is late, queued behind batches that may run past
// its deadline, and only its caller arms a timer, at that deadline. No
// caller waits past its deadline. The price is that a
// command shares its batch's deadline: one that joined a batch after
// another had queued for a while gets less than its whole timeout, short
// by how long that one had waited for a pipeline connection — nothing
// while one is free, up to a timeout when Redis has answered nothing for
// that long.
//
// With replica acknowledgement on (waitN > 0), a batch that holds a
// command whose caller waits for replicas (doAcked) ends with one WAIT,
// pipelined after its commands on the same connection: WAIT counts the
// replicas that hold every write of its connection so far, so its answer
// is each of those commands' answer. In a Cluster those commands go to
// their masters, a pipeline and a WAIT per master, and the batch's other
// commands through the Cluster pipeline as without acknowledgement. The
// WAIT is bounded by the batch's deadline as its commands are.
type batcher struct {
	c redis.UniversalClient
	// epoch is what the commands' deadlines are counted from (monotonic).
	epoch time.Time
	// waitN and waitTimeout are the WAIT's arguments; waitN 0: no WAIT.
	waitN       int
	waitTimeout time.Duration

	mu     sync.Mutex
	cur    *batch   // filling
	full   []*batch // filled to maxBatch, waiting for the flusher
	closed bool
	// latest is the latest deadline queued so far, since epoch: a
	// command due more than lateSlack before it may queue behind a batch
	// that runs past its deadline.
	latest time.Duration

	wake    chan struct{} // a command was queued; capacity 1
	permits chan struct{} // one per batch in flight
	// sends hands the batches to the senders, maxConcurrentBatches
	// goroutines kept for the batcher's life: a goroutine started per
	// batch grew its stack in go-redis's pipeline on every batch, copying
	// it each time (docs/performance.md). The flusher closes it.
	sends   chan *batch
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
	// dls are the commands' deadlines, since the batcher's epoch.
	dls []time.Duration
	// acked are the commands whose callers wait for replicas.
	acked []ackedCmd
	done  chan struct{}
	// When some commands had passed their deadline as the batch was
	// sent, at cut (since the batcher's epoch), they failed, and the
	// others went on as next, in order (nil when all failed). Both are
	// set before done is closed.
	next *batch
	cut  time.Duration
	// The first commands' room, in the batch's own allocation.
	cmdBuf [8]redis.Cmder
	dlBuf  [8]time.Duration
}

// ackedCmd is a command of a batch that is followed by a WAIT.
type ackedCmd struct {
	i    int           // in batch.cmds
	key  string        // its Redis key: which master it goes to in a Cluster
	wait *redis.IntCmd // the WAIT that covers it, set by exec
}

func newBatch() *batch {
	bt := &batch{done: make(chan struct{})}
	bt.cmds, bt.dls = bt.cmdBuf[:0], bt.dlBuf[:0]
	return bt
}

var (
	errQueueFull = errors.New("too many commands queued for Redis")
	// errQueuedTooLong is the error of a command whose deadline passed
	// before a pipeline connection was free to send it.
	errQueuedTooLong = fmt.Errorf("%w: not sent, every pipeline connection still waiting for Redis", context.DeadlineExceeded)
	// errLateNoReply is the error of a late command (see batcher) whose
	// deadline passed before it had its reply, sent or not.
	errLateNoReply = fmt.Errorf("%w: no reply from Redis, queued behind commands due later", context.DeadlineExceeded)
)

// lateSlack is how much earlier than the latest deadline queued a
// command's may be and still count as in order: the moment between an
// operation's start and its queueing, which a goroutine descheduled in
// between stretches. An in-order command waits at most that past its
// deadline, and only while Redis answers nothing.
const lateSlack = time.Millisecond

// queuedCmd is where a command queued: the i-th of bt, due by dl, late if
// it may queue behind a batch that runs past dl.
type queuedCmd struct {
	bt   *batch
	i    int
	dl   time.Time
	late bool
}

// newBatcher starts the flusher of c's batches. waitN > 0 ends each batch
// that holds an acknowledged command with WAIT waitN waitTimeout.
func newBatcher(c redis.UniversalClient, waitN int, waitTimeout time.Duration) *batcher {
	b := &batcher{
		c:           c,
		epoch:       time.Now(),
		waitN:       waitN,
		waitTimeout: waitTimeout,
		cur:         newBatch(),
		wake:        make(chan struct{}, 1),
		permits:     make(chan struct{}, maxConcurrentBatches),
		sends:       make(chan *batch, maxConcurrentBatches),
		stop:        make(chan struct{}),
		stopped:     make(chan struct{}),
	}
	go b.flusher()
	for range maxConcurrentBatches {
		go b.sender()
	}
	return b
}

// do queues cmd, to be answered by dl, and waits until it has its reply
// or ctx is done. In the second case cmd must not be read; it still runs
// if it was sent.
func (b *batcher) do(ctx context.Context, dl time.Time, cmd redis.Cmder) error {
	q, err := b.enqueue(cmd, dl, "", false)
	if err != nil {
		return err
	}
	_, _, err = b.await(ctx, q)
	return err
}

// doAcked is do for a write to key that must reach waitN replicas: it
// also returns how many replicas the batch's WAIT counted, or its error.
// Both are meaningless when err is not nil nor redis.Nil.
func (b *batcher) doAcked(ctx context.Context, dl time.Time, key string, cmd redis.Cmder) (acked int64, waitErr, err error) {
	q, err := b.enqueue(cmd, dl, key, true)
	if err != nil {
		return 0, nil, err
	}
	bt, i, err := b.await(ctx, q)
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, nil, err
	}
	for _, a := range bt.acked {
		if a.i == i {
			acked, waitErr = a.wait.Result()
		}
	}
	return acked, waitErr, err
}

// enqueue adds cmd, to be answered by dl, to the batch being filled and
// wakes the flusher, and says where it queued. With ack, it is one of the
// batch's acknowledged commands.
func (b *batcher) enqueue(cmd redis.Cmder, dl time.Time, key string, ack bool) (queuedCmd, error) {
	if b.queued.Add(1) > maxQueued {
		b.queued.Add(-1)
		return queuedCmd{}, errQueueFull
	}
	d := dl.Sub(b.epoch)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.queued.Add(-1)
		return queuedCmd{}, redis.ErrClosed
	}
	bt := b.cur
	q := queuedCmd{bt: bt, i: len(bt.cmds), dl: dl, late: d < b.latest-lateSlack}
	b.latest = max(b.latest, d)
	if ack {
		bt.acked = append(bt.acked, ackedCmd{i: q.i, key: key})
	}
	bt.cmds = append(bt.cmds, cmd)
	bt.dls = append(bt.dls, d)
	if len(bt.cmds) == maxBatch {
		b.full = append(b.full, bt)
		b.cur = newBatch()
	}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default: // the flusher is already due to run
	}
	return q, nil
}

// await waits until the command q has its reply and returns its error, or
// until ctx is done and returns ctx's, or, for a late command, until its
// deadline passes. It also returns the batch the command was sent in, and
// its place there. Unless the error is the command's, it must not be read.
func (b *batcher) await(ctx context.Context, q queuedCmd) (*batch, int, error) {
	var expired <-chan time.Time
	if q.late {
		t := time.NewTimer(time.Until(q.dl))
		defer t.Stop()
		expired = t.C
	}
	bt, i := q.bt, q.i
	for {
		select {
		case <-bt.done:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-expired:
			return nil, 0, errLateNoReply
		}
		if bt.next == nil || bt.dls[i] <= bt.cut {
			return bt, i, bt.cmds[i].Err()
		}
		// Its place in next: after those before it that went on too.
		j := 0
		for _, dl := range bt.dls[:i] {
			if dl > bt.cut {
				j++
			}
		}
		bt, i = bt.next, j
	}
}

// flusher sends the queued commands, a batch at a time, until close.
func (b *batcher) flusher() {
	defer close(b.stopped)
	defer close(b.sends)
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
			b.sends <- bt // never blocks: each batch here holds one of the permits
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

// sender runs each batch it is handed (send).
func (b *batcher) sender() {
	for bt := range b.sends {
		b.send(bt)
	}
}

// send runs bt as one pipeline, bounded by its commands' deadlines, and
// releases its permit however exec ends.
func (b *batcher) send(bt *batch) {
	defer func() { <-b.permits }()
	b.exec(bt)
}

func (b *batcher) exec(bt *batch) {
	bt = b.dropExpired(bt)
	if bt == nil {
		return
	}
	// One deadline for the whole pipeline, its earliest command's: no
	// caller waits past its own.
	ctx, cancel := context.WithDeadline(context.Background(), b.epoch.Add(slices.Min(bt.dls)))
	defer cancel()
	if len(bt.acked) == 0 {
		pipeline(ctx, b.c, bt.cmds, nil)
	} else if cc, ok := b.c.(*redis.ClusterClient); ok {
		b.execCluster(ctx, cc, bt)
	} else {
		wait := b.newWait(ctx)
		for j := range bt.acked {
			bt.acked[j].wait = wait
		}
		pipeline(ctx, b.c, bt.cmds, wait)
	}
	b.queued.Add(-int64(len(bt.cmds)))
	close(bt.done)
}

// dropExpired fails, unsent, the commands of bt whose deadline has passed
// and answers their callers at once. It returns the batch of the others,
// or nil if there are none. Only those fail: deadlines need not run in
// the order the commands queued (a late command's is earlier).
func (b *batcher) dropExpired(bt *batch) *batch {
	now := time.Since(b.epoch)
	n := 0
	for _, dl := range bt.dls {
		if dl <= now {
			n++
		}
	}
	if n == 0 {
		return bt
	}
	b.queued.Add(-int64(n))
	var next *batch
	if n < len(bt.cmds) {
		next = newBatch()
	}
	// moved[i] is where the i-th command goes in next, -1 if it fails.
	var movedBuf [maxBatch]int
	moved := movedBuf[:len(bt.cmds)]
	for i, cmd := range bt.cmds {
		if bt.dls[i] <= now {
			cmd.SetErr(errQueuedTooLong)
			moved[i] = -1
			continue
		}
		moved[i] = len(next.cmds)
		next.cmds = append(next.cmds, cmd)
		next.dls = append(next.dls, bt.dls[i])
	}
	if next != nil {
		for _, a := range bt.acked {
			if j := moved[a.i]; j >= 0 {
				a.i = j
				next.acked = append(next.acked, a)
			}
		}
	}
	bt.next, bt.cut = next, now
	close(bt.done)
	return next
}

func (b *batcher) newWait(ctx context.Context) *redis.IntCmd {
	return redis.NewIntCmd(ctx, "wait", b.waitN, millis(b.waitTimeout))
}

// group is the commands of a batch sent to one master, and the WAIT
// after them.
type group struct {
	cmds []redis.Cmder
	wait *redis.IntCmd
}

// execCluster sends bt's acknowledged commands to their masters, one
// pipeline ending in WAIT per master (a Cluster pipeline would send a
// keyless WAIT to any node), and its other commands as one Cluster
// pipeline, all at once. The masters are those of the client's slot map:
// an acknowledged command a master answers MOVED or ASK is sent again
// where that answer says (followRedirects), as the Cluster pipeline does
// for the others.
func (b *batcher) execCluster(ctx context.Context, cc *redis.ClusterClient, bt *batch) {
	groups := map[*redis.Client]*group{}
	isAcked := make([]bool, len(bt.cmds))
	for j := range bt.acked {
		a := &bt.acked[j]
		isAcked[a.i] = true
		node, err := cc.MasterForKey(ctx, a.key)
		if err != nil {
			bt.cmds[a.i].SetErr(err)
			a.wait = b.newWait(ctx)
			a.wait.SetErr(err)
			continue
		}
		g := groups[node]
		if g == nil {
			g = &group{wait: b.newWait(ctx)}
			groups[node] = g
		}
		g.cmds = append(g.cmds, bt.cmds[a.i])
		a.wait = g.wait
	}
	var rest []redis.Cmder
	for i, cmd := range bt.cmds {
		if !isAcked[i] {
			rest = append(rest, cmd)
		}
	}
	var wg sync.WaitGroup
	if len(rest) > 0 {
		wg.Go(func() { pipeline(ctx, cc, rest, nil) })
	}
	for node, g := range groups {
		wg.Go(func() { pipeline(ctx, node, g.cmds, g.wait) })
	}
	wg.Wait()
	b.followRedirects(ctx, cc, bt)
}

// followRedirects sends again, once, each acknowledged command of bt that
// its master answered MOVED (the slot has another master: a reshard, a
// replica promoted) or ASK (the slot is on its way, and the key is gone
// from the master moving it), to the master that answer names, with a
// WAIT there. The client's slot map is out of date then, and until
// something reloads it every acknowledged write to those slots would
// fail; masterAt loads it anew. Neither answer ran the command, so sending
// it again is safe.
func (b *batcher) followRedirects(ctx context.Context, cc *redis.ClusterClient, bt *batch) {
	type target struct {
		addr string
		ask  bool
	}
	var groups map[target]*group
	for j := range bt.acked {
		a := &bt.acked[j]
		addr, ask, ok := redirectOf(bt.cmds[a.i].Err())
		if !ok {
			continue
		}
		if groups == nil {
			groups = map[target]*group{}
		}
		t := target{addr, ask}
		g := groups[t]
		if g == nil {
			g = &group{wait: b.newWait(ctx)}
			groups[t] = g
		}
		g.cmds = append(g.cmds, bt.cmds[a.i])
		a.wait = g.wait
	}
	if groups == nil {
		return
	}
	var wg sync.WaitGroup
	for t, g := range groups {
		wg.Go(func() {
			node, err := masterAt(ctx, cc, t.addr)
			if err != nil {
				for _, cmd := range g.cmds {
					cmd.SetErr(err)
				}
				g.wait.SetErr(err)
				return
			}
			pipeline(ctx, node, redirected(ctx, g.cmds, t.ask), g.wait)
		})
	}
	wg.Wait()
}

// pipeline runs cmds, then wait unless it is nil, as one pipeline of c.
func pipeline(ctx context.Context, c redis.Cmdable, cmds []redis.Cmder, wait redis.Cmder) {
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, cmd := range cmds {
			_ = p.Process(ctx, cmd)
		}
		if wait != nil {
			_ = p.Process(ctx, wait)
		}
		return nil
	})
	// Each command has its own reply or error, and Pipelined's error is
	// the first of those — except when the pipeline never ran: a
	// connection that could not be made ready (a wrong password, a
	// database out of range) leaves the commands untouched.
	if err == nil || slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Err() == err }) ||
		wait != nil && wait.Err() == err {
		return
	}
	for _, cmd := range cmds {
		if cmd.Err() == nil {
			cmd.SetErr(err)
		}
	}
	if wait != nil && wait.Err() == nil {
		wait.SetErr(err)
	}
}

// drain sends what is still queued, once the store is closing: its
// callers get an answer or the closed client's error rather than waiting
// for their deadline.
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
