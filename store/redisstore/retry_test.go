package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// TestRetriedCompletionAfterPauseIsNotALostLease pauses Redis (CLIENT PAUSE
// from a second connection) while a completion is in flight: the caller
// gives up (its context ends before the pause does), Redis runs the
// completion when the pause ends (the store's own timeout is longer, so the
// connection stays open), and the caller's retry of the same record with the
// same token must succeed rather than report a lost lease. The record has
// many headers, so that an encoding that depended on map order would differ
// between the two attempts.
func TestRetriedCompletionAfterPauseIsNotALostLease(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{URL: srv.URL(), Timeout: 3 * time.Second})
	admin := srv.Client(t)
	ctx := context.Background()
	fp := store.Fingerprint{8}
	// Load the completion script, as any earlier completion has in
	// production: the paused attempt must be an EVALSHA that runs.
	warm, err := s.Begin(ctx, "warm", store.Lease{Fingerprint: fp}, time.Minute)
	if err == nil {
		err = s.Complete(ctx, "warm", warm.Token, &store.Record{Status: 200}, time.Hour)
	}
	if err != nil {
		t.Fatalf("warming up: %v", err)
	}
	b, err := s.Begin(ctx, "k", store.Lease{Fingerprint: fp}, time.Minute)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	record := func() *store.Record {
		rec := &store.Record{Status: 201, Body: []byte("created"), Fingerprint: fp, CreatedAt: time.UnixMilli(1_700_000_000_000)}
		rec.Header = map[string][]string{}
		for i := range 20 {
			rec.Header[fmt.Sprintf("X-H%02d", i)] = []string{fmt.Sprint(i)}
		}
		return rec
	}

	if err := admin.Do(ctx, "CLIENT", "PAUSE", 500).Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := s.Complete(short, "k", b.Token, record(), time.Hour); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Complete during the pause = %v, want ErrUnavailable (gave up)", err)
	}
	// The admin's GET waits out the pause; the abandoned completion runs
	// first or soon after.
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		v, err := admin.Get(ctx, "idem:{k}").Bytes()
		if err != nil || len(v) == 0 || v[0] != kindRecord {
			return fmt.Errorf("the paused completion has not run: %q, %v", v, err)
		}
		return nil
	})
	if err := s.Complete(ctx, "k", b.Token, record(), time.Hour); err != nil {
		t.Fatalf("retried Complete of the same record = %v, want nil", err)
	}
}
