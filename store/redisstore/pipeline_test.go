package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/internal/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// TestConcurrentCommandsAreBatched checks that the commands of concurrent
// callers reach Redis in batches over few connections: Redis reads several
// commands per read event. One connection per caller, or one command per
// read, would mean the auto-pipeliner is not in use.
func TestConcurrentCommandsAreBatched(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{URL: srv.URL()})
	admin := srv.Client(t)
	ctx := context.Background()
	if _, err := s.Begin(ctx, "warm", store.Fingerprint{}, time.Minute); err != nil {
		t.Fatalf("Begin: %v", err)
	}
	before := stats(t, admin)

	const callers, each = 64, 20
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Go(func() {
			<-start
			for i := range each {
				key := "k" + strconv.Itoa(c) + "-" + strconv.Itoa(i)
				if _, err := s.Begin(ctx, key, store.Fingerprint{}, time.Minute); err != nil {
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

	after := stats(t, admin)
	// The admin client's INFO calls add one command and one read each.
	commands := after["total_commands_processed"] - before["total_commands_processed"] - 1
	reads := after["total_reads_processed"] - before["total_reads_processed"] - 1
	conns := after["total_connections_received"] - before["total_connections_received"]
	t.Logf("%d commands in %d reads over %d new connections", commands, reads, conns)
	if commands != callers*each {
		t.Fatalf("Redis processed %d commands, want %d", commands, callers*each)
	}
	if reads*2 > commands {
		t.Errorf("Redis needed %d reads for %d commands; batches would need far fewer", reads, commands)
	}
	if conns > 4 {
		t.Errorf("the store opened %d connections for %d concurrent callers; a batched stream needs one or two", conns, callers)
	}
}

// TestQueueIsBounded checks that commands pile up behind a hung Redis only
// up to maxQueued; past that they fail at once instead of holding memory.
func TestQueueIsBounded(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 2 * time.Second
	s := newStore(t, Options{URL: srv.URL(), Timeout: timeout})
	ctx := context.Background()
	if _, err := s.Begin(ctx, "warm", store.Fingerprint{}, time.Minute); err != nil {
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
			_, err := s.Begin(ctx, "q"+strconv.Itoa(i), store.Fingerprint{}, time.Minute)
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
