package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// A statement the database refuses rolls its whole batch back; the
// batch's other statements are then run alone and get their own answers,
// and the refused one its refusal.
func TestStatementRefusedInABatchLeavesTheOthersTheirAnswers(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	s := newStore(t, srv, Options{Table: "batched"})
	owned := map[string]string{}
	for _, key := range []string{"a-refused", "d-completed"} {
		b, err := s.Begin(ctx, key, store.Lease{}, time.Minute)
		if err != nil || b.State != store.Acquired {
			t.Fatalf("Begin(%s) = %v, %v", key, b.State, err)
		}
		owned[key] = b.Token
	}
	if _, err := srv.Conn(t).Exec(ctx, `ALTER TABLE batched ADD CONSTRAINT no_a CHECK (key <> 'a-refused' OR head IS NULL) NOT VALID`); err != nil {
		t.Fatal(err)
	}
	rec := &store.Record{Status: 201, Body: []byte("ok")}
	refused := completeCall("a-refused", owned["a-refused"], rec, time.Hour)
	completed := completeCall("d-completed", owned["d-completed"], rec, time.Hour)
	begun := []*call{s.beginCall("b-new", store.Lease{}, time.Minute), s.beginCall("c-new", store.Lease{}, time.Minute)}
	batch := []*call{completed, begun[1], refused, begun[0]}
	for _, c := range batch {
		c.deadline = time.Now().Add(testTimeout)
	}
	s.batch.run(batch)

	if err := s.translate("complete", refused.err); !errors.Is(err, store.ErrRefused) {
		t.Errorf("the refused Complete = %v, want ErrRefused", err)
	}
	if completed.err != nil || completed.tag.RowsAffected() != 1 {
		t.Errorf("the Complete beside it = %v, %d rows; want it recorded", completed.err, completed.tag.RowsAffected())
	}
	for _, c := range begun {
		if res, err := c.beginResult(store.Fingerprint{}); err != nil || res.State != store.Acquired {
			t.Errorf("Begin(%s) beside it = %v, %v; want acquired", c.key, res.State, err)
		}
	}
	for key, want := range map[string]store.State{"a-refused": store.InFlight, "b-new": store.InFlight, "c-new": store.InFlight, "d-completed": store.Completed} {
		if e, err := s.Inspect(ctx, key); err != nil || e.State != want {
			t.Errorf("Inspect(%s) = %v, %v; want %v", key, e.State, err, want)
		}
	}
}

// A statement the database refuses in a batch of its own is sent once:
// its refusal is already its own, and is its caller's answer. A trigger
// refuses every record here, counting its attempts in a sequence, which
// the rollback of a refused statement does not undo.
func TestStatementRefusedAloneIsSentOnce(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	s := newStore(t, srv, Options{Table: "refused_alone"})
	b, err := s.Begin(ctx, "k", store.Lease{}, time.Minute)
	if err != nil || b.State != store.Acquired {
		t.Fatalf("Begin = %v, %v", b.State, err)
	}
	admin := srv.Conn(t)
	if _, err := admin.Exec(ctx, `
		CREATE SEQUENCE attempts;
		CREATE FUNCTION refuse_record() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM nextval('attempts');
			IF NEW.head IS NOT NULL THEN
				RAISE EXCEPTION 'refused' USING ERRCODE = 'check_violation';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_record BEFORE UPDATE ON refused_alone
			FOR EACH ROW EXECUTE FUNCTION refuse_record()`); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "k", b.Token, &store.Record{Status: 201}, time.Hour); !errors.Is(err, store.ErrRefused) {
		t.Fatalf("Complete the database refuses = %v, want ErrRefused", err)
	}
	var attempts int
	if err := admin.QueryRow(ctx, `SELECT last_value FROM attempts`).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if attempts != 1 {
		t.Errorf("the refused Complete ran %d times, want once", attempts)
	}
}

// A Begin whose statement returns no row (here a trigger skips its
// insert; the statement itself always returns one) is answered with
// pgx.ErrNoRows, on which Begin tries again alone: that is the
// statement's own answer, not a failure of its batch, whose other
// statements stand.
func TestBeginThatGetsNoRowIsToldSoAndItsBatchStands(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	s := newStore(t, srv, Options{Table: "no_row"})
	if _, err := srv.Conn(t).Exec(ctx, `
		CREATE FUNCTION skip_insert() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.key = 'a-no-row' THEN
				RETURN NULL;
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER skip_insert BEFORE INSERT ON no_row
			FOR EACH ROW EXECUTE FUNCTION skip_insert()`); err != nil {
		t.Fatal(err)
	}
	noRow := s.beginCall("a-no-row", store.Lease{}, time.Minute)
	beside := s.beginCall("b-beside", store.Lease{}, time.Minute)
	for _, c := range []*call{noRow, beside} {
		c.deadline = time.Now().Add(testTimeout)
	}
	s.batch.run([]*call{noRow, beside})
	if !errors.Is(noRow.err, pgx.ErrNoRows) {
		t.Errorf("the Begin that got no row = %v, want pgx.ErrNoRows", noRow.err)
	}
	if res, err := beside.beginResult(store.Fingerprint{}); beside.err != nil || err != nil || res.State != store.Acquired {
		t.Errorf("the Begin beside it = %v, %v, %v; want acquired", res.State, beside.err, err)
	}
}

// Many Begins of a few keys at once, batched together, take each key's
// lease exactly once; the others see it in flight.
func TestConcurrentBeginsOfOneKeyAcquireItOnce(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	s := newStore(t, srv, Options{Table: "concurrent_begins"})
	const keys, each = 16, 4
	var mu sync.Mutex
	acquired := map[string]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range keys * each {
		wg.Go(func() {
			<-start
			key := fmt.Sprintf("k%02d", i%keys)
			res, err := s.Begin(ctx, key, store.Lease{}, time.Minute)
			if err != nil {
				t.Errorf("Begin(%s): %v", key, err)
				return
			}
			if res.State == store.Acquired {
				mu.Lock()
				acquired[key]++
				mu.Unlock()
			} else if res.State != store.InFlight {
				t.Errorf("Begin(%s) = %v, want acquired or in flight", key, res.State)
			}
		})
	}
	close(start)
	wg.Wait()
	for i := range keys {
		key := fmt.Sprintf("k%02d", i)
		if acquired[key] != 1 {
			t.Errorf("%s acquired %d times, want once", key, acquired[key])
		}
	}
}

// At most maxConcurrentBatches batches are in flight, each holding a
// connection: while two wait (here for row locks another transaction
// holds), the next statement queues for a later batch instead of taking
// one more connection, and is answered once the locks are released.
func TestStatementQueuesWhileTheBatchesInFlightAreAtTheirBound(t *testing.T) {
	srv := pgtest.Start(t)
	bg := context.Background()
	s := newStore(t, srv, Options{Table: "in_flight", SweepInterval: -1})
	holder, err := srv.Conn(t).Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Rollback(bg) })
	var keys []string
	for i := range maxConcurrentBatches + 1 {
		key := fmt.Sprintf("k%d", i)
		if _, err := holder.Exec(bg, `INSERT INTO in_flight (key, token, fingerprint, expires_at) VALUES ($1, 'holder', '', now())`, key); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	watcher := srv.Conn(t)
	lockWaits := func() (int, error) {
		var n int
		err := watcher.QueryRow(bg, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'`).Scan(&n)
		return n, err
	}
	answers := make(chan error, len(keys))
	for i, key := range keys {
		go func() {
			res, err := s.Begin(bg, key, store.Lease{}, time.Hour)
			if err == nil && res.State != store.Acquired {
				err = fmt.Errorf("Begin(%s) = %v, want acquired", key, res.State)
			}
			answers <- err
		}()
		if i == maxConcurrentBatches {
			break
		}
		// This Begin's batch waits for its lock before the next is sent.
		wait.SucceedsSoon(t, testTimeout, func() error {
			if n, err := lockWaits(); err != nil || n != i+1 {
				return fmt.Errorf("%d batches wait for their locks (%v), want %d", n, err, i+1)
			}
			return nil
		})
	}
	// The last Begin has queued, or taken a connection of its own.
	wait.SucceedsSoon(t, testTimeout, func() error {
		s.batch.mu.Lock()
		queued := len(s.batch.queue)
		s.batch.mu.Unlock()
		n, err := lockWaits()
		if err != nil {
			return err
		}
		if queued == 0 && n <= maxConcurrentBatches {
			return errors.New("the last Begin is neither queued nor waiting for its lock")
		}
		return nil
	})
	if n, err := lockWaits(); err != nil || n != maxConcurrentBatches {
		t.Errorf("%d batches in flight (%v), want %d: the last Begin was sent on one more connection", n, err, maxConcurrentBatches)
	}
	if err := holder.Rollback(bg); err != nil {
		t.Fatal(err)
	}
	for range keys {
		if err := <-answers; err != nil {
			t.Error(err)
		}
	}
}

// More statements than one batch holds (maxBatch), queued at once, are
// sent in the batches that follow: every caller is answered, none left to
// wait out its deadline.
func TestStatementsQueuedBeyondOneBatchAreAllAnswered(t *testing.T) {
	srv := pgtest.Start(t)
	s := newStore(t, srv, Options{Table: "beyond_a_batch"})
	var queued []*call
	for i := range maxBatch + 1 {
		c := s.beginCall(fmt.Sprintf("k%03d", i), store.Lease{}, time.Hour)
		c.deadline = time.Now().Add(testTimeout)
		c.done = make(chan struct{})
		queued = append(queued, c)
	}
	s.batch.mu.Lock()
	s.batch.queue = slices.Clone(queued)
	s.batch.inFlight++
	s.batch.flushers.Add(1)
	s.batch.mu.Unlock()
	s.batch.flush()
	for _, c := range queued {
		select {
		case <-c.done:
		default:
			t.Fatalf("Begin(%s) is not answered once the queue was flushed", c.key)
		}
		if res, err := c.beginResult(store.Fingerprint{}); c.err != nil || err != nil || res.State != store.Acquired {
			t.Errorf("Begin(%s) = %v, %v, %v; want acquired", c.key, res.State, c.err, err)
		}
	}
}

// Every batch takes its row locks in key order, one key's statements in
// the order they queued: two batches then never wait for each other in a
// cycle.
func TestBatchTakesItsRowLocksInKeyOrder(t *testing.T) {
	var batch []*call
	for i, key := range []string{"c", "a", "b", "a", "c"} {
		batch = append(batch, &call{key: key, args: []any{i}})
	}
	inLockOrder(batch)
	var got []string
	for _, c := range batch {
		got = append(got, fmt.Sprint(c.key, c.args[0]))
	}
	if want := []string{"a1", "a3", "b2", "c0", "c4"}; !slices.Equal(got, want) {
		t.Errorf("order = %v, want %v", got, want)
	}
}

// A Begin whose caller left before its batch answered does not leave its
// key in flight until the lease expires: the lease it took is given back.
// The batch is held on a row lock of another transaction until its
// caller has left.
func TestLeaseOfABeginWhoseCallerLeftIsGivenBack(t *testing.T) {
	srv := pgtest.Start(t)
	bg := context.Background()
	s := newStore(t, srv, Options{Table: "callers_left"})
	holder, _ := beginWhoseCallerLeft(t, srv, s, "callers_left")
	if err := holder.Rollback(bg); err != nil {
		t.Fatal(err)
	}
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		res, err := s.Begin(bg, "k", store.Lease{}, time.Hour)
		if err != nil {
			return err
		}
		if res.State != store.Acquired {
			return fmt.Errorf("Begin = %v, want acquired: the lease of the caller that left is still there", res.State)
		}
		return nil
	})
}

// A statement whose caller's deadline passed while it queued is not sent,
// and the others of its batch are, each answered to its caller.
func TestStatementPastItsDeadlineIsNotSentAndTheOthersAre(t *testing.T) {
	srv := pgtest.Start(t)
	s := newStore(t, srv, Options{Table: "late"})
	late := s.beginCall("a-late", store.Lease{}, time.Minute)
	late.deadline = time.Now().Add(-time.Millisecond)
	onTime := s.beginCall("b-on-time", store.Lease{}, time.Minute)
	onTime.deadline = time.Now().Add(testTimeout)
	batch := []*call{late, onTime}
	for _, c := range batch {
		c.done = make(chan struct{})
	}
	s.batch.run(batch)
	for _, c := range batch {
		s.batch.deliver(c)
		<-c.done
	}
	if !errors.Is(late.err, context.DeadlineExceeded) {
		t.Errorf("the late Begin = %v, want its deadline exceeded", late.err)
	}
	if res, err := onTime.beginResult(store.Fingerprint{}); err != nil || res.State != store.Acquired {
		t.Errorf("the Begin beside it = %v, %v; want acquired", res.State, err)
	}
	if _, err := s.Inspect(context.Background(), "a-late"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Inspect of the late key = %v, want not found: it was sent", err)
	}
}

// A record that has expired by the database's clock is not replayed, even
// by a Begin late in a batch whose transaction began before the expiry:
// here the batch's first statement waits for a row lock past it.
func TestExpiredRecordIsNotReplayedLateInABatch(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	s := newStore(t, srv, Options{Table: "late_in_batch"})
	held, err := s.Begin(ctx, "a-held", store.Lease{}, time.Minute)
	if err != nil || held.State != store.Acquired {
		t.Fatalf("Begin(a-held) = %v, %v", held.State, err)
	}
	b, err := s.Begin(ctx, "b-expiring", store.Lease{}, time.Minute)
	if err != nil || b.State != store.Acquired {
		t.Fatalf("Begin(b-expiring) = %v, %v", b.State, err)
	}
	if err := s.Complete(ctx, "b-expiring", b.Token, &store.Record{Status: 201}, time.Second); err != nil {
		t.Fatal(err)
	}
	lock, err := srv.Conn(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, `SELECT FROM late_in_batch WHERE key = 'a-held' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	extend := &call{kind: callExtend, key: "a-held", args: []any{"a-held", held.Token, time.Minute.Milliseconds()}}
	replay := s.beginCall("b-expiring", store.Lease{}, time.Minute)
	for _, c := range []*call{extend, replay} {
		c.deadline = time.Now().Add(testTimeout)
	}
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		s.batch.run([]*call{extend, replay})
	}()
	watch := srv.Conn(t)
	wait.SucceedsSoon(t, testTimeout, func() error {
		var waiting, expired bool
		err := watch.QueryRow(ctx, `SELECT
				EXISTS (SELECT FROM pg_stat_activity WHERE wait_event_type = 'Lock'),
				(SELECT expires_at <= now() FROM late_in_batch WHERE key = 'b-expiring')`).Scan(&waiting, &expired)
		if err != nil {
			return err
		}
		if !waiting || !expired {
			return fmt.Errorf("batch waiting for its lock: %v; record expired: %v", waiting, expired)
		}
		return nil
	})
	if err := lock.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	<-ran
	if extend.err != nil || replay.err != nil {
		t.Fatalf("batch: extend %v, begin %v", extend.err, replay.err)
	}
	if res, err := replay.beginResult(store.Fingerprint{}); err != nil || res.State != store.Acquired {
		t.Errorf("Begin of a key whose record expired = %v, %v; want acquired", res.State, err)
	}
}

// A batch whose commit the database refuses tells none of its callers
// "ok": each statement is then run alone, and only the ones whose own
// commit stands are answered as done.
func TestBatchWhoseCommitFailsAcknowledgesNothingItDidNotCommit(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	s := newStore(t, srv, Options{Table: "commit_refused"})
	owned := map[string]string{}
	for _, key := range []string{"a-refused-at-commit", "b-completed"} {
		b, err := s.Begin(ctx, key, store.Lease{}, time.Minute)
		if err != nil || b.State != store.Acquired {
			t.Fatalf("Begin(%s) = %v, %v", key, b.State, err)
		}
		owned[key] = b.Token
	}
	// A deferred constraint trigger: every statement succeeds, and the
	// commit is refused.
	if _, err := srv.Conn(t).Exec(ctx, `
		CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.key = 'a-refused-at-commit' AND NEW.head IS NOT NULL THEN
				RAISE EXCEPTION 'refused at commit' USING ERRCODE = 'check_violation';
			END IF;
			RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER UPDATE ON commit_refused
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_at_commit()`); err != nil {
		t.Fatal(err)
	}
	rec := &store.Record{Status: 201, Body: []byte("ok")}
	refused := completeCall("a-refused-at-commit", owned["a-refused-at-commit"], rec, time.Hour)
	completed := completeCall("b-completed", owned["b-completed"], rec, time.Hour)
	for _, batch := range [][]*call{{refused, completed}, {refused}} {
		for _, c := range batch {
			c.deadline = time.Now().Add(testTimeout)
			c.err, c.tag = nil, pgconn.CommandTag{}
		}
		s.batch.run(batch)
		if err := s.translate("complete", refused.err); !errors.Is(err, store.ErrRefused) {
			t.Errorf("batch of %d: the Complete refused at commit = %v, want ErrRefused", len(batch), err)
		}
	}
	if completed.err != nil || completed.tag.RowsAffected() != 1 {
		t.Errorf("the Complete beside it = %v, %d rows; want it recorded", completed.err, completed.tag.RowsAffected())
	}
	for key, want := range map[string]store.State{"a-refused-at-commit": store.InFlight, "b-completed": store.Completed} {
		if e, err := s.Inspect(ctx, key); err != nil || e.State != want {
			t.Errorf("Inspect(%s) = %v, %v; want %v", key, e.State, err, want)
		}
	}
}

// The callers of a batch are answered before the leases of callers that
// left are given back: a release that waits (here for a lock) delays no
// caller's answer, which its deadline would otherwise turn into
// "unavailable" for a statement that committed.
func TestCallersAreAnsweredBeforeALeftLeaseIsGivenBack(t *testing.T) {
	srv := pgtest.Start(t)
	bg := context.Background()
	s := newStore(t, srv, Options{Table: "answered_first"})
	admin := srv.Conn(t)
	if _, err := admin.Exec(bg, `
		CREATE FUNCTION wait_for_lock() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_advisory_xact_lock(42); RETURN OLD; END $$;
		CREATE TRIGGER wait_for_lock BEFORE DELETE ON answered_first
			FOR EACH ROW EXECUTE FUNCTION wait_for_lock()`); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(bg, `SELECT pg_advisory_lock(42)`); err != nil {
		t.Fatal(err)
	}
	left := s.beginCall("a-left", store.Lease{}, time.Hour)
	waiting := s.beginCall("b-waiting", store.Lease{}, time.Hour)
	for _, c := range []*call{left, waiting} {
		c.deadline = time.Now().Add(testTimeout)
		c.done = make(chan struct{})
	}
	left.state.Store(callAbandoned)
	s.batch.mu.Lock()
	s.batch.queue = []*call{left, waiting}
	s.batch.inFlight++
	s.batch.flushers.Add(1)
	s.batch.mu.Unlock()
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		s.batch.flush()
	}()
	wait.SucceedsSoon(t, testTimeout, func() error {
		var n int
		if err := admin.QueryRow(bg, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'`).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return errors.New("the release of the left lease is not waiting yet")
		}
		return nil
	})
	select {
	case <-waiting.done:
	default:
		t.Error("a caller of the batch is not answered while the release of a left lease waits")
	}
	if _, err := admin.Exec(bg, `SELECT pg_advisory_unlock(42)`); err != nil {
		t.Fatal(err)
	}
	<-flushed
	if res, err := waiting.beginResult(store.Fingerprint{}); waiting.err != nil || err != nil || res.State != store.Acquired {
		t.Errorf("Begin(b-waiting) = %v, %v, %v; want acquired", res.State, waiting.err, err)
	}
	if e, err := s.Inspect(bg, "a-left"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Inspect(a-left) = %v, %v; want its lease given back", e.State, err)
	}
}

// Close waits for the batches in flight: a lease taken for a caller that
// left is given back before the pool closes.
func TestCloseWaitsForTheBatchesInFlight(t *testing.T) {
	srv := pgtest.Start(t)
	bg := context.Background()
	s := newStore(t, srv, Options{Table: "closing"})
	holder, watcher := beginWhoseCallerLeft(t, srv, s, "closing")
	closed := make(chan struct{})
	go func() {
		_ = s.Close()
		close(closed)
	}()
	if err := holder.Rollback(bg); err != nil {
		t.Fatal(err)
	}
	<-closed
	var rows int
	if err := watcher.QueryRow(bg, `SELECT count(*) FROM closing WHERE key = 'k'`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatal("Close returned before its batch gave back the lease of the caller that left")
	}
	if _, err := s.Begin(bg, "k2", store.Lease{}, time.Hour); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Begin after Close = %v, want ErrUnavailable", err)
	}
}

// beginWhoseCallerLeft holds key k of table on a row lock in another
// transaction (holder, still open: the caller rolls it back), sends s's
// Begin of k, waits until its batch waits for that lock, then cancels the
// Begin's caller, which must get ErrUnavailable. watcher is a connection
// of its own for the caller's checks.
func beginWhoseCallerLeft(t *testing.T, srv *pgtest.Server, s *Store, table string) (holder pgx.Tx, watcher *pgx.Conn) {
	t.Helper()
	bg := context.Background()
	holder, err := srv.Conn(t).Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Rollback(bg) })
	if _, err := holder.Exec(bg, `INSERT INTO `+table+` (key, token, fingerprint, expires_at) VALUES ('k', 'holder', '', now())`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := s.Begin(ctx, "k", store.Lease{}, time.Hour)
		errc <- err
	}()
	watcher = srv.Conn(t)
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		var waiting int
		if err := watcher.QueryRow(bg, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			return err
		}
		if waiting == 0 {
			return errors.New("the Begin's batch is not waiting for the row lock yet")
		}
		return nil
	})
	cancel()
	if err := <-errc; !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Begin whose caller left = %v, want ErrUnavailable", err)
	}
	return holder, watcher
}
