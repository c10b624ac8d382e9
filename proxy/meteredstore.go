package proxy

import (
	"context"
	"errors"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// meteredStore is the handler's Store: it times every lease operation in
// idempotency_proxy_store_operation_duration_seconds and counts failures in
// idempotency_proxy_store_errors_total. A lost lease is not a store
// failure: it is counted in idempotency_proxy_lock_lost_total instead; nor
// is an unreadable record (idempotency_proxy_record_unreadable_total).
// It reads the handler's clock, so that a miss can time its Begin and its
// Complete from readings it takes anyway (beginFrom, CompleteFrom).
type meteredStore struct {
	Store
	m     *Metrics
	clock *execution.Clock // the handler's, which tests replace
}

var _ Store = meteredStore{}

func (s meteredStore) Begin(ctx context.Context, key string, l store.Lease, ttl time.Duration) (store.BeginResult, error) {
	return s.beginFrom(ctx, (*s.clock).Now(), key, l, ttl)
}

// beginFrom is Begin timed from start, a reading of the clock the caller
// took just before.
func (s meteredStore) beginFrom(ctx context.Context, start time.Time, key string, l store.Lease, ttl time.Duration) (store.BeginResult, error) {
	res, err := s.Store.Begin(ctx, key, l, ttl)
	s.m.observeStore(opBegin, (*s.clock).Now().Sub(start), failed(err))
	return res, err
}

func (s meteredStore) Extend(ctx context.Context, key, token string, lease time.Duration) error {
	t := (*s.clock).Now()
	err := s.Store.Extend(ctx, key, token, lease)
	s.m.observeStore(opExtend, (*s.clock).Now().Sub(t), failed(err))
	return err
}

func (s meteredStore) Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	return s.CompleteFrom(ctx, (*s.clock).Now(), key, token, rec, ttl)
}

// CompleteFrom is Complete timed from start, as beginFrom: settling
// times its first try from when the call returned (execution.Settling).
func (s meteredStore) CompleteFrom(ctx context.Context, start time.Time, key, token string, rec *store.Record, ttl time.Duration) error {
	err := s.Store.Complete(ctx, key, token, rec, ttl)
	s.m.observeStore(opComplete, (*s.clock).Now().Sub(start), failed(err))
	return err
}

func (s meteredStore) Release(ctx context.Context, key, token string) error {
	t := (*s.clock).Now()
	err := s.Store.Release(ctx, key, token)
	s.m.observeStore(opRelease, (*s.clock).Now().Sub(t), err != nil)
	return err
}

func failed(err error) bool {
	return err != nil && !errors.Is(err, store.ErrLockLost) && !errors.Is(err, store.ErrUnreadable)
}

// observeStore counts one store operation: its duration, and its error.
func (m *Metrics) observeStore(op storeOp, d time.Duration, failed bool) {
	om := &m.ops[op]
	om.duration.Observe(d.Seconds())
	if failed {
		om.errors.Inc()
	}
}
