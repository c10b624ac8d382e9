package proxy

import (
	"context"
	"errors"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// meteredStore is the handler's Store: it times every lease operation in
// idempotency_proxy_store_operation_duration_seconds and counts failures in
// idempotency_proxy_store_errors_total. A lost lease is not a store
// failure: it is counted in idempotency_proxy_lock_lost_total instead; nor
// is an unreadable record (idempotency_proxy_record_unreadable_total).
type meteredStore struct {
	Store
	m *Metrics
}

var _ Store = meteredStore{}

func (s meteredStore) Begin(ctx context.Context, key string, l store.Lease, ttl time.Duration) (store.BeginResult, error) {
	t := time.Now()
	res, err := s.Store.Begin(ctx, key, l, ttl)
	s.m.observeStore(opBegin, time.Since(t), failed(err))
	return res, err
}

func (s meteredStore) Extend(ctx context.Context, key, token string, lease time.Duration) error {
	t := time.Now()
	err := s.Store.Extend(ctx, key, token, lease)
	s.m.observeStore(opExtend, time.Since(t), failed(err))
	return err
}

func (s meteredStore) Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	t := time.Now()
	err := s.Store.Complete(ctx, key, token, rec, ttl)
	s.m.observeStore(opComplete, time.Since(t), failed(err))
	return err
}

func (s meteredStore) Release(ctx context.Context, key, token string) error {
	t := time.Now()
	err := s.Store.Release(ctx, key, token)
	s.m.observeStore(opRelease, time.Since(t), err != nil)
	return err
}

func failed(err error) bool {
	return err != nil && !errors.Is(err, store.ErrLockLost) && !errors.Is(err, store.ErrUnreadable)
}
