package postgres

import (
	"cmp"
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// batcher sends the statements of concurrent operations — Begin, Extend,
// Complete, Release — to the database together: one pipeline on one
// connection, one write and one read for the batch instead of a round
// trip for each, and one commit. Without it, every request pays a round
// trip and a commit (with the database's fsync) twice, and each of those
// wakes the proxy and a backend for one statement.
//
// A batch is what has queued by the time its flusher runs after yielding
// once (runtime.Gosched), as the Redis store's batches are: the request
// goroutines that were ready to run queue their statements first. A lone
// statement is sent at once; no timer holds anyone back. At most
// maxConcurrentBatches batches are in flight, each on a connection of the
// pool; while they are, statements queue for the next.
//
// A batch runs in one transaction (the extended protocol's implicit one,
// up to its Sync), which is what makes its commit one:
//
//   - Its statements take their row locks in key order: every batch takes
//     them in the same order, so two batches never wait for each other in
//     a cycle (a deadlock the database would break by failing one).
//   - A statement the database refuses (a constraint, a full disk) rolls
//     the whole batch back. The batch's statements are then run again one
//     by one, each in its own transaction, so that the refusal is that
//     statement's own and the others' answers are their own. A batch whose
//     answer was lost (the connection, a timeout) is unavailable to each
//     of its callers, as a single statement whose answer was lost is: it
//     may have committed.
//   - A statement is answered when its batch has committed: a replay that
//     shares a batch with writes waits for their WAL flush, which alone
//     it would not.
//   - Expiry is judged by statement_timestamp(), the time each statement
//     began, not now(), the time the batch's transaction began: a
//     statement late in a batch, behind one that waited for a row lock
//     another batch held, would otherwise see a row that expired while it
//     waited as live.
//
// Each caller waits for its batch until its own deadline (the store's
// timeout from its operation's start) or its context's end, then gets
// ErrUnavailable; a statement whose deadline passed while it queued is
// not sent, and a batch runs until the latest deadline of its statements,
// so that one that queued long does not cut the others short. A lease a
// Begin took after its caller left is released by the flusher, so that a
// key is not left "in flight" until its lease expires because its client
// went away.
type batcher struct {
	s *Store

	mu       sync.Mutex
	queue    []*call
	inFlight int
	closed   bool           // set by close: nothing more is queued
	flushers sync.WaitGroup // the flushers running, for close
}

// errClosed is the answer of an operation called after Close.
var errClosed = errors.New("store closed")

const (
	// maxBatch bounds the statements of one batch: a batch holds its row
	// locks until its commit.
	maxBatch = 64
	// maxConcurrentBatches bounds the batches in flight, each holding one
	// connection of the pool. Two keep a batch filling while the other is
	// answered; more make smaller batches, each a commit and a wake-up of
	// the proxy and of a backend (docs/design-decisions.md has the runs).
	maxConcurrentBatches = 2
)

// callKind is what a call's statement is.
type callKind uint8

const (
	callBegin callKind = iota
	callExtend
	callComplete
	callRelease
)

// call is one operation's statement waiting for its batch.
type call struct {
	kind     callKind
	key      string
	args     []any
	deadline time.Time

	// Set by the flusher before done is closed.
	tag   pgconn.CommandTag
	begun beginRow
	err   error
	done  chan struct{}

	// state settles who had the last word: callWaiting until the flusher
	// delivers (callDelivered) or the caller leaves (callAbandoned).
	state atomic.Uint32
}

const (
	callWaiting uint32 = iota
	callDelivered
	callAbandoned
)

// beginRow is what the begin statement returns.
type beginRow struct {
	owner                   string
	fingerprint, head, body []byte
	lease                   []byte
	// left is a live record's time left by the database's clock, in
	// milliseconds, when the statement ran; 0 for a row it wrote.
	left int64
}

// scan reads the begin statement's row into r.
func (r *beginRow) scan(row pgx.Row) error {
	return row.Scan(&r.owner, &r.fingerprint, &r.head, &r.body, &r.lease, &r.left)
}

func (s *Store) sqlOf(k callKind) string {
	switch k {
	case callBegin:
		return s.sql.begin
	case callExtend:
		return s.sql.extend
	case callComplete:
		return s.sql.complete
	default:
		return s.sql.release
	}
}

// do queues c and waits for its answer or for ctx to end.
func (b *batcher) do(ctx context.Context, c *call) error {
	c.done = make(chan struct{})
	c.deadline, _ = ctx.Deadline()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return errClosed
	}
	b.queue = append(b.queue, c)
	lead := b.inFlight < maxConcurrentBatches
	if lead {
		b.inFlight++
		b.flushers.Add(1)
	}
	b.mu.Unlock()
	if lead {
		go b.flush()
	}
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		if c.state.CompareAndSwap(callWaiting, callAbandoned) {
			return ctx.Err()
		}
		<-c.done // delivered meanwhile
		return c.err
	}
}

// close refuses new statements and waits until the flushers have sent
// what was queued, answered its callers and given back the leases of
// those that left: the pool they use closes next.
func (b *batcher) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.flushers.Wait()
}

// flush sends batches until the queue is empty.
func (b *batcher) flush() {
	defer b.flushers.Done()
	runtime.Gosched()
	for {
		b.mu.Lock()
		n := min(len(b.queue), maxBatch)
		if n == 0 {
			b.inFlight--
			b.mu.Unlock()
			return
		}
		batch := slices.Clone(b.queue[:n])
		clear(b.queue[:n])
		b.queue = b.queue[n:]
		if len(b.queue) == 0 {
			b.queue = nil
		}
		b.mu.Unlock()
		b.run(batch)
		// Every caller is answered before any lease is given back: a
		// release that waits must not hold back the others' answers.
		left := batch[:0:0]
		for _, c := range batch {
			if !b.deliver(c) {
				left = append(left, c)
			}
		}
		for _, c := range left {
			b.giveBack(c)
		}
	}
}

// deliver hands c's answer to its caller, and reports false when the
// caller left instead (giveBack).
func (b *batcher) deliver(c *call) bool {
	delivered := c.state.CompareAndSwap(callWaiting, callDelivered)
	close(c.done)
	return delivered
}

// giveBack releases the lease c's Begin took for a caller that left.
func (b *batcher) giveBack(c *call) {
	if c.kind == callBegin && c.err == nil && c.begun.owner == c.args[1] {
		ctx, cancel := context.WithTimeout(context.Background(), b.s.timeout)
		defer cancel()
		if _, err := b.s.pool.Exec(ctx, b.s.sql.release, c.key, c.begun.owner); err != nil {
			b.s.log.Warn("postgres lease of a caller that left not released: its key answers in flight until the lease expires",
				"error", b.s.translate("release", err).Error())
		}
	}
}

// run sends batch as one pipeline and sets each call's answer. A batch the
// database refused is run again one statement at a time.
func (b *batcher) run(batch []*call) {
	// A statement whose caller's deadline passed while it queued is not
	// sent: its caller has left or is leaving. batch itself keeps every
	// call, for the flusher to deliver.
	now := time.Now()
	live := make([]*call, 0, len(batch))
	for _, c := range batch {
		if !c.deadline.IsZero() && !c.deadline.After(now) {
			c.err = context.DeadlineExceeded
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	batch = live
	inLockOrder(batch)
	ctx, cancel := b.context(batch)
	defer cancel()
	err := b.send(ctx, batch)
	var pe *pgconn.PgError
	switch {
	case err == nil:
		return
	case len(batch) > 1 && errors.As(err, &pe):
		// Rolled back, every statement of it: each alone now.
		for _, c := range batch {
			b.send1(c)
		}
	default:
		for _, c := range batch {
			c.err = err
		}
	}
}

// inLockOrder sorts batch by key, keeping one key's statements in the
// order they queued: the order every batch takes its row locks in.
func inLockOrder(batch []*call) {
	slices.SortStableFunc(batch, func(x, y *call) int { return cmp.Compare(x.key, y.key) })
}

// context is the batch's: it ends at the latest of its calls' deadlines,
// and at most the store's timeout from now. A call that queued longer
// than the others does not cut their batch short: its caller stops
// waiting at its own deadline (do).
func (b *batcher) context(batch []*call) (context.Context, context.CancelFunc) {
	limit := time.Now().Add(b.s.timeout)
	var end time.Time
	for _, c := range batch {
		if c.deadline.After(end) {
			end = c.deadline
		}
	}
	if end.IsZero() || end.After(limit) {
		end = limit
	}
	return context.WithDeadline(context.Background(), end)
}

// send1 runs c alone under its own deadline.
func (b *batcher) send1(c *call) {
	ctx, cancel := b.context([]*call{c})
	defer cancel()
	if err := b.send(ctx, []*call{c}); err != nil {
		c.err = err
	}
}

// send pipelines batch on one connection and reads every answer, then the
// commit's. It returns the first error; the calls' answers stand only when
// it returns nil.
func (b *batcher) send(ctx context.Context, batch []*call) error {
	pb := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(batch))}
	for _, c := range batch {
		pb.Queue(b.s.sqlOf(c.kind), c.args...)
	}
	br := b.s.pool.SendBatch(ctx, pb)
	var first error
	for _, c := range batch {
		var err error
		if c.kind == callBegin {
			err = c.begun.scan(br.QueryRow())
		} else {
			c.tag, err = br.Exec()
		}
		c.err = err
		// No row is that statement's own answer (Begin tries again), not
		// a failure of the batch.
		if err != nil && first == nil && !errors.Is(err, pgx.ErrNoRows) {
			first = err
		}
	}
	if err := br.Close(); err != nil && first == nil {
		first = err
	}
	if first != nil && len(batch) > 1 {
		for _, c := range batch {
			c.err = first
		}
	}
	return first
}
