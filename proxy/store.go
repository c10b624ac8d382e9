package proxy

import (
	"context"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Store is what the handler needs from an idempotency store; every
// store.Store implements it (see store.BeginResult for the states). Its
// health (Ping) is the admin listener's concern, not the handler's.
// Complete must keep nothing of its record once it returns, as every
// store.Store does: the handler reuses the record's header.
type Store interface {
	Begin(ctx context.Context, key string, l store.Lease, ttl time.Duration) (store.BeginResult, error)
	Extend(ctx context.Context, key, token string, lease time.Duration) error
	Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error
	Release(ctx context.Context, key, token string) error
}
