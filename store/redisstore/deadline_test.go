package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// holdPipelines takes every pipeline connection's permit, so that what
// is queued meanwhile goes out as one batch when the returned function
// gives them back.
func holdPipelines(t *testing.T, s *Store) (release func()) {
	t.Helper()
	for range maxConcurrentBatches {
		s.batch.permits <- struct{}{}
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			for range maxConcurrentBatches {
				<-s.batch.permits
			}
		})
	}
	t.Cleanup(release)
	return release
}

// queuedSoon waits until n commands are queued.
func queuedSoon(t *testing.T, s *Store, n int64) {
	t.Helper()
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if q := s.batch.queued.Load(); q != n {
			return fmt.Errorf("%d commands queued, want %d", q, n)
		}
		return nil
	})
}

// inFlightSoon waits until n batches of one command each are in flight:
// n commands accepted, none left in a batch being filled, and n permits
// held. A permit alone is not a batch: the flusher takes one before it
// looks for a batch to send, so n permits may be n-1 batches and the
// flusher about to take the n-th command — together with whatever the
// test queues next.
func inFlightSoon(t *testing.T, s *Store, n int) {
	t.Helper()
	b := s.batch
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		b.mu.Lock()
		filling := len(b.cur.cmds) + len(b.full)
		b.mu.Unlock()
		if filling != 0 {
			return fmt.Errorf("%d commands or full batches not yet taken by the flusher", filling)
		}
		if q := b.queued.Load(); q != int64(n) {
			return fmt.Errorf("%d commands queued or in flight, want %d", q, n)
		}
		if got := len(b.permits); got != n {
			return fmt.Errorf("%d batches in flight, want %d", got, n)
		}
		return nil
	})
}

// TestCommandPastItsDeadlineIsNotSent checks that a command whose
// deadline passed while it queued fails with the timeout, unsent, and that
// the others of its batch still go, with a deadline of their own.
func TestCommandPastItsDeadlineIsNotSent(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{URL: srv.URL(), Timeout: 10 * time.Second})
	admin := srv.Client(t)
	ctx := context.Background()

	release := holdPipelines(t, s)
	late := redis.NewStatusCmd(ctx, "set", "late", "1")
	fresh := redis.NewStatusCmd(ctx, "set", "fresh", "1")
	lateErr, freshErr := make(chan error, 1), make(chan error, 1)
	go func() { lateErr <- s.batch.do(ctx, time.Now().Add(-time.Millisecond), late) }()
	queuedSoon(t, s, 1)
	go func() { freshErr <- s.batch.do(ctx, time.Now().Add(10*time.Second), fresh) }()
	queuedSoon(t, s, 2)
	release()

	if err := <-lateErr; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("command past its deadline: %v, want context.DeadlineExceeded", err)
	}
	if err := <-freshErr; err != nil {
		t.Errorf("command within its deadline, batched with one past it: %v, want sent", err)
	}
	if n := admin.Exists(ctx, "late").Val(); n != 0 {
		t.Errorf("the command past its deadline was sent")
	}
	if v := admin.Get(ctx, "fresh").Val(); v != "1" {
		t.Errorf("fresh = %q, want 1", v)
	}
	if q := s.batch.queued.Load(); q != 0 {
		t.Errorf("%d commands counted as queued after both were answered", q)
	}
}

// TestCommandPastItsDeadlineIsAnsweredAtOnce checks that the caller of a
// command whose deadline passed while it queued is answered when its batch
// is formed, not when the rest of the batch has its answer from a Redis
// that has stopped answering.
func TestCommandPastItsDeadlineIsAnsweredAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 2 * time.Second
	s := newStore(t, Options{URL: srv.URL(), Timeout: timeout})
	ctx := context.Background()
	if err := s.batch.do(ctx, time.Now().Add(timeout), redis.NewStatusCmd(ctx, "ping")); err != nil {
		t.Fatalf("PING: %v", err)
	}

	release := holdPipelines(t, s)
	lateErr, freshErr := make(chan error, 1), make(chan error, 1)
	go func() {
		lateErr <- s.batch.do(ctx, time.Now().Add(-time.Millisecond), redis.NewStatusCmd(ctx, "set", "late", "1"))
	}()
	queuedSoon(t, s, 1)
	go func() {
		freshErr <- s.batch.do(ctx, time.Now().Add(timeout), redis.NewStatusCmd(ctx, "set", "fresh", "1"))
	}()
	queuedSoon(t, s, 2)
	srv.Pause()
	t.Cleanup(srv.Resume)
	start := time.Now()
	release()

	err := <-lateErr
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > timeout/2 {
		t.Errorf("command past its deadline: %v after %v, want context.DeadlineExceeded at once (the rest of its batch waits %v)", err, took, timeout)
	}
	if err := <-freshErr; err == nil {
		t.Errorf("command sent to a paused Redis succeeded")
	}
}

// TestStalledRedisFailsEveryOperationWithinItsTimeout checks the bound of
// store.redis.timeout against a Redis that stops answering: the
// operations in flight, one queued behind them and one that joined the
// same queue, and so the same batch, most of a timeout later each fail
// within their own timeout of their start — not twice it, as one that
// waited for a pipeline connection and then for a batch timed from its
// sending would, nor the later one's timeout, as one in a batch timed by
// its latest command would — and a caller that cancels is answered at
// once.
func TestStalledRedisFailsEveryOperationWithinItsTimeout(t *testing.T) {
	srv := redistest.Start(t)
	// Long enough that setting up the batches in flight on a busy machine
	// takes a small part of it.
	const timeout = 3 * time.Second
	// Generous for a busy machine; a bound twice the timeout, or the
	// timeout plus the gap between the two queued operations, exceeds it.
	const bound = timeout + timeout*4/10
	s := newStore(t, Options{URL: srv.URL(), Timeout: timeout})
	ctx := context.Background()
	if _, err := s.Begin(ctx, "warm", store.Lease{}, time.Minute); err != nil {
		t.Fatalf("Begin: %v", err)
	}
	srv.Pause()
	t.Cleanup(srv.Resume)

	type result struct {
		name  string
		start time.Time
		took  time.Duration
		err   error
	}
	results := make(chan result, maxConcurrentBatches+3)
	begin := func(ctx context.Context, name string) {
		start := time.Now()
		_, err := s.Begin(ctx, name, store.Lease{}, time.Minute)
		results <- result{name, start, time.Since(start), err}
	}
	// Each of these is a batch of its own, until every pipeline
	// connection waits for Redis.
	stalled := time.Now()
	for i := range maxConcurrentBatches {
		go begin(ctx, "in-flight-"+strconv.Itoa(i))
		inFlightSoon(t, s, i+1)
	}
	// The two queued operations are spaced in time on purpose: the first
	// must still be within its timeout when the batches ahead of it end,
	// and the later one join it more than bound-timeout after it started,
	// before those batches end. There is nothing to wait for but time.
	time.Sleep(time.Until(stalled.Add(timeout * 2 / 10)))
	first := time.Now()
	go begin(ctx, "queued-first")
	queuedSoon(t, s, maxConcurrentBatches+1)
	cctx, cancel := context.WithCancel(ctx)
	go begin(cctx, "cancelled")
	queuedSoon(t, s, maxConcurrentBatches+2)
	cancel()
	if r := <-results; r.name != "cancelled" || !errors.Is(r.err, context.Canceled) || r.took > timeout/2 {
		t.Errorf("first answer: %s after %v: %v; want the cancelled Begin, context.Canceled, at once", r.name, r.took, r.err)
	}
	time.Sleep(time.Until(first.Add(timeout / 2)))
	later := time.Now()
	go begin(ctx, "queued-later")

	// The first batch in flight to end is the first to start: each ends
	// by its own start's deadline.
	var firstEnd time.Time
	for range maxConcurrentBatches + 2 {
		r := <-results
		t.Logf("%s: %v after %v", r.name, r.err, r.took)
		if r.name == "in-flight-0" {
			firstEnd = r.start.Add(r.took)
		}
		if !errors.Is(r.err, store.ErrUnavailable) {
			t.Errorf("%s: %v, want ErrUnavailable", r.name, r.err)
		}
		if r.took > bound {
			t.Errorf("%s answered after %v, want within its timeout (%v, allowing up to %v)", r.name, r.took, timeout, bound)
		}
	}
	// Otherwise queued-later went in a batch of its own, and queued-first
	// was not shown to keep its own deadline in a batch with a later one.
	if !later.Before(firstEnd) {
		t.Errorf("queued-later began %v after the first batch in flight ended: too slow a start to put it in queued-first's batch",
			later.Sub(firstEnd))
	}
}

// TestCommandWaitingForANewMasterSaysSo checks that a command that waited
// for a Sentinel master until its deadline fails within its timeout, and
// that its error names what it waited for and why the dial failed.
func TestCommandWaitingForANewMasterSaysSo(t *testing.T) {
	// No failover while the test runs: the command waits for a master.
	sn := redistest.StartSentinel(t, redistest.WithDownAfter(time.Minute))
	// Long enough that a busy machine's scheduling stays well inside the
	// half-timeout allowed past it.
	const timeout = time.Second
	s := newStore(t, Options{Addrs: sn.SentinelAddrs(), MasterName: sn.MasterName(), Timeout: timeout})
	ctx := context.Background()
	if _, err := s.Begin(ctx, "warm", store.Lease{}, time.Minute); err != nil {
		t.Fatalf("Begin: %v", err)
	}
	sn.Master.Kill()
	start := time.Now()
	_, err := s.Begin(ctx, "k", store.Lease{}, time.Minute)
	took := time.Since(start)
	t.Logf("after %v: %v", took, err)
	if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) ||
		strings.Count(err.Error(), "waiting for a new master") != 1 || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Begin with the master gone: %v; want ErrUnavailable, the deadline, and once what it waited for and why", err)
	}
	if took > timeout+timeout/2 {
		t.Errorf("Begin with the master gone answered after %v, want within its timeout (%v)", took, timeout)
	}
}

// TestCommandWithinItsDeadlineIsSentBesideOnesPastIt checks that, of a
// batch whose commands' deadlines do not run in the order they queued (an
// operation's second command keeps the deadline of its start), only those
// past their deadline fail unsent: a command queued before one of them
// but within its own deadline is sent, and every caller gets the reply to
// its own command.
func TestCommandWithinItsDeadlineIsSentBesideOnesPastIt(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{URL: srv.URL(), Timeout: 10 * time.Second})
	admin := srv.Client(t)
	ctx := context.Background()
	for _, k := range []string{"a", "c", "e"} {
		admin.Set(ctx, k, "value of "+k, 0)
	}

	release := holdPipelines(t, s)
	type queued struct {
		key  string
		dl   time.Time
		cmd  *redis.StringCmd
		errc chan error
	}
	now := time.Now()
	cmds := []queued{
		{key: "a", dl: now.Add(10 * time.Second)},
		{key: "b", dl: now.Add(-time.Millisecond)},
		{key: "c", dl: now.Add(10 * time.Second)},
		{key: "d", dl: now.Add(-time.Millisecond)},
		{key: "e", dl: now.Add(10 * time.Second)},
	}
	for i := range cmds {
		q := &cmds[i]
		if q.dl.Before(now) {
			q.cmd = redis.NewStringCmd(ctx, "set", q.key, "sent")
		} else {
			q.cmd = redis.NewStringCmd(ctx, "get", q.key)
		}
		q.errc = make(chan error, 1)
		go func() { q.errc <- s.batch.do(ctx, q.dl, q.cmd) }()
		queuedSoon(t, s, int64(i+1))
	}
	release()

	for _, q := range cmds {
		err := <-q.errc
		if q.dl.Before(now) {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("command on %s past its deadline: %v, want context.DeadlineExceeded", q.key, err)
			}
			if n := admin.Exists(ctx, q.key).Val(); n != 0 {
				t.Errorf("the command on %s past its deadline was sent", q.key)
			}
			continue
		}
		if err != nil || q.cmd.Val() != "value of "+q.key {
			t.Errorf("GET %s within its deadline, batched with commands past theirs: %q, %v; want %q",
				q.key, q.cmd.Val(), err, "value of "+q.key)
		}
	}
	queuedSoon(t, s, 0)
}

// TestCommandQueuedBehindLaterDeadlinesIsAnsweredByItsOwn checks that a
// command whose deadline is earlier than those of batches in flight ahead
// of it — the lease Begin gives back, a script sent again by its source,
// each by its operation's deadline — is answered by its own deadline when
// Redis stops answering, not when those batches end, and is not sent.
func TestCommandQueuedBehindLaterDeadlinesIsAnsweredByItsOwn(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{URL: srv.URL(), Timeout: 10 * time.Second})
	ctx := context.Background()
	if err := s.batch.do(ctx, time.Now().Add(time.Second), redis.NewStatusCmd(ctx, "ping")); err != nil {
		t.Fatalf("PING: %v", err)
	}
	srv.Pause()
	t.Cleanup(srv.Resume)

	// Far beyond the command's own deadline, and long enough that the
	// batches ahead are still in flight however slowly a busy machine
	// sets them up.
	const ahead = 20 * time.Second
	for i := range maxConcurrentBatches {
		go func() { _ = s.batch.do(ctx, time.Now().Add(ahead), redis.NewStatusCmd(ctx, "ping")) }()
		inFlightSoon(t, s, i+1)
	}
	const own = 300 * time.Millisecond
	start := time.Now()
	err := s.batch.do(ctx, start.Add(own), redis.NewStatusCmd(ctx, "set", "late", "1"))
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || took > own+2*time.Second {
		t.Errorf("command behind batches due in %v: %v after %v; want context.DeadlineExceeded by its own deadline (%v)",
			ahead, err, took, own)
	}
	srv.Resume()
	queuedSoon(t, s, 0)
	if n := srv.Client(t).Exists(ctx, "late").Val(); n != 0 {
		t.Errorf("the command past its deadline was sent once Redis answered again")
	}
}
