package proxy

import (
	"context"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Store is what the handler needs from an idempotency store. The memory and
// Redis stores in package store implement it; see store.BeginResult for the states.
type Store interface {
	Begin(ctx context.Context, key string, fp store.Fingerprint, lease time.Duration) (store.BeginResult, error)
	Extend(ctx context.Context, key, token string, lease time.Duration) error
	Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error
	Release(ctx context.Context, key, token string) error
	Ping(ctx context.Context) error
}
