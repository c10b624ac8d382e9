package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// A store opened with the default options sweeps in the background, every
// defaultSweepInterval: the expired rows go, and with them the deletions
// kept longer than deletionsKept and the registrations whose lease ended;
// what is live stays.
func TestExpiredRowsAreSweptInTheBackground(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	s := newStore(t, srv, Options{Table: "background"})
	if b, err := s.Begin(ctx, "live", store.Lease{}, time.Hour); err != nil || b.State != store.Acquired {
		t.Fatalf("Begin = %+v, %v", b, err)
	}
	conn := srv.Conn(t)
	for _, q := range []string{
		`INSERT INTO background (key, token, fingerprint, expires_at)
			SELECT 'old-' || i, 't', '\x00', now() - interval '1 second' FROM generate_series(1, 10) i`,
		fmt.Sprintf(`INSERT INTO background_deletions (key, at) VALUES
			('old', now() - interval '%d milliseconds' - interval '1 minute'), ('recent', now())`, deletionsKept.Milliseconds()),
		`INSERT INTO background_replicas (id, acked, expires_at) VALUES
			('ended', 0, now() - interval '1 second'), ('serving', 0, now() + interval '1 hour')`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	left := func() (rows, deletions, replicas string, err error) {
		err = conn.QueryRow(ctx, `SELECT
			(SELECT string_agg(key, ',' ORDER BY key) FROM background),
			(SELECT string_agg(key, ',' ORDER BY key) FROM background_deletions),
			(SELECT string_agg(id, ',' ORDER BY id) FROM background_replicas)`).Scan(&rows, &deletions, &replicas)
		return rows, deletions, replicas, err
	}
	wait.SucceedsSoon(t, defaultSweepInterval+testTimeout, func() error {
		rows, deletions, replicas, err := left()
		if err == nil && (rows != "live" || deletions != "recent" || replicas != "serving") {
			err = fmt.Errorf("left: rows %s, deletions %s, registrations %s; want live, recent, serving", rows, deletions, replicas)
		}
		return err
	})
}
