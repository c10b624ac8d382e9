package redisstore

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// TestConcurrentCommandsAreBatched checks that the commands of concurrent
// callers reach Redis in batches over few connections: Redis reads several
// commands per read event. One connection per caller, or one command per
// read, would mean the commands are not batched. It holds with one CPU
// (GOMAXPROCS=1, a sidecar's allowance) as with several: a flusher that
// sends as soon as it is woken would send one command per batch there.
func TestConcurrentCommandsAreBatched(t *testing.T) {
	for _, procs := range []int{1, runtime.GOMAXPROCS(0)} {
		t.Run("GOMAXPROCS="+strconv.Itoa(procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			testBatched(t)
		})
	}
}

func testBatched(t *testing.T) {
	srv := redistest.Start(t)
	// A caller waits behind the batches of the others, and longer on a busy
	// machine: the test is about how the commands reach Redis, not how fast,
	// so none may time out.
	s := newStore(t, Options{URL: srv.URL(), Timeout: 30 * time.Second})
	admin := srv.Client(t)
	ctx := context.Background()
	if _, err := s.Begin(ctx, "warm", store.Lease{}, time.Minute); err != nil {
		t.Fatalf("Begin: %v", err)
	}
	before, setsBefore := stats(t, admin), commandCalls(t, admin)["set"]

	const callers, each = 128, 10
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Go(func() {
			<-start
			for i := range each {
				key := "k" + strconv.Itoa(c) + "-" + strconv.Itoa(i)
				if _, err := s.Begin(ctx, key, store.Lease{}, time.Minute); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Begin: %v", err)
	}

	sets := commandCalls(t, admin)["set"] - setsBefore
	after := stats(t, admin)
	// The admin client's two INFO calls add a read each; a new connection
	// may add a command of its own.
	reads := after["total_reads_processed"] - before["total_reads_processed"] - 2
	conns := after["total_connections_received"] - before["total_connections_received"]
	t.Logf("%d commands in %d reads over %d new connections", sets, reads, conns)
	if sets != callers*each {
		t.Fatalf("Redis processed %d SET commands, want %d", sets, callers*each)
	}
	commands := sets
	// Batches of 20 or more are typical; sent as soon as the flusher is
	// woken, they average 2 to 9 on one CPU.
	if reads*10 > commands {
		t.Errorf("Redis needed %d reads for %d commands; batches of 10 or more would need at most %d", reads, commands, commands/10)
	}
	if conns > 5 {
		t.Errorf("the store opened %d connections for %d concurrent callers; at most 4 batches in flight need no more than 4", conns, callers)
	}
}

// TestQueueIsBounded checks that commands pile up behind a hung Redis only
// up to maxQueued; past that they fail at once instead of holding memory.
func TestQueueIsBounded(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 2 * time.Second
	s := newStore(t, Options{URL: srv.URL(), Timeout: timeout})
	ctx := context.Background()
	if _, err := s.Begin(ctx, "warm", store.Lease{}, time.Minute); err != nil {
		t.Fatalf("Begin: %v", err)
	}
	srv.Pause()
	t.Cleanup(srv.Resume)

	const extra = 100
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		fast int // refused well before the timeout
	)
	for i := range maxQueued + extra {
		wg.Go(func() {
			start := time.Now()
			_, err := s.Begin(ctx, "q"+strconv.Itoa(i), store.Lease{}, time.Minute)
			if !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("Begin on a hung Redis = %v, want ErrUnavailable", err)
			}
			if time.Since(start) < timeout/2 {
				mu.Lock()
				fast++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if fast < extra {
		t.Errorf("%d Begins were refused at once, want at least the %d past the queue's bound of %d", fast, extra, maxQueued)
	}
	if fast > extra+maxQueued/2 {
		t.Errorf("%d Begins were refused at once; the queue should have held about %d", fast, maxQueued)
	}
}

// stats parses INFO stats into its integer fields.
func stats(t *testing.T, admin *redis.Client) map[string]int {
	t.Helper()
	info, err := admin.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatalf("INFO stats: %v", err)
	}
	out := map[string]int{}
	for line := range strings.Lines(info) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if n, err := strconv.Atoi(value); ok && err == nil {
			out[name] = n
		}
	}
	return out
}

// TestLargeRecordsReplayedTogether checks that batches whose replies are
// large records (a replay's SET … GET returns the whole record) give every
// caller its own record, intact.
func TestLargeRecordsReplayedTogether(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{URL: srv.URL(), Timeout: 5 * time.Second})
	ctx := context.Background()
	const keys, callers = 16, 64
	for k := range keys {
		key := "big" + strconv.Itoa(k)
		b, err := s.Begin(ctx, key, store.Lease{Fingerprint: store.Fingerprint{byte(k)}}, time.Minute)
		if err != nil {
			t.Fatalf("Begin: %v", err)
		}
		rec := &store.Record{Status: 200, Body: bytes.Repeat([]byte{byte(k)}, 512<<10), Fingerprint: store.Fingerprint{byte(k)}}
		if err := s.Complete(ctx, key, b.Token, rec, time.Hour); err != nil {
			t.Fatalf("Complete: %v", err)
		}
	}
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			k := c % keys
			b, err := s.Begin(ctx, "big"+strconv.Itoa(k), store.Lease{}, time.Minute)
			switch {
			case err != nil:
				t.Errorf("Begin: %v", err)
			case b.State != store.Completed || b.Record.Fingerprint != (store.Fingerprint{byte(k)}):
				t.Errorf("Begin on big%d = state %v, fingerprint %x; want its record", k, b.State, b.Fingerprint[:1])
			case len(b.Record.Body) != 512<<10 || bytes.Count(b.Record.Body, []byte{byte(k)}) != 512<<10:
				t.Errorf("Begin on big%d: body of %d bytes, not the %d bytes of %d recorded", k, len(b.Record.Body), 512<<10, k)
			}
		})
	}
	wg.Wait()
}
