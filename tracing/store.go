package tracing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idempotency-proxy/idempotency-proxy/proxy"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Span names of the store operations.
const (
	SpanStoreBegin    = "idempotency.store.begin"
	SpanStoreExtend   = "idempotency.store.extend"
	SpanStoreComplete = "idempotency.store.complete"
	SpanStoreRelease  = "idempotency.store.release"
)

// Store returns st with a span around each Begin, Extend, Complete and
// Release, a child of the span in the operation's context. Readiness
// pings the store itself, untraced.
func (t *Tracer) Store(st proxy.Store) proxy.Store {
	return &tracedStore{next: st, tracer: t.tracer}
}

type tracedStore struct {
	next   proxy.Store
	tracer trace.Tracer
}

var _ proxy.Store = (*tracedStore)(nil)

func (s *tracedStore) start(ctx context.Context, name, key string) (context.Context, trace.Span) {
	return s.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(AttrKeyHash.String(key)))
}

// Begin is the store's Begin, in a span; the lease it takes names the
// request's trace (store.Lease.TraceID), which its span belongs to.
func (s *tracedStore) Begin(ctx context.Context, key string, l store.Lease, ttl time.Duration) (store.BeginResult, error) {
	ctx, span := s.start(ctx, SpanStoreBegin, key)
	if sc := span.SpanContext(); l.TraceID == "" && sc.HasTraceID() {
		l.TraceID = sc.TraceID().String()
	}
	res, err := s.next.Begin(ctx, key, l, ttl)
	if err == nil {
		span.SetAttributes(AttrStoreState.String(res.State.String()))
	}
	endStoreSpan(span, err)
	return res, err
}

func (s *tracedStore) Extend(ctx context.Context, key, token string, lease time.Duration) error {
	ctx, span := s.start(ctx, SpanStoreExtend, key)
	err := s.next.Extend(ctx, key, token, lease)
	endStoreSpan(span, err)
	return err
}

func (s *tracedStore) Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	ctx, span := s.start(ctx, SpanStoreComplete, key)
	err := s.next.Complete(ctx, key, token, rec, ttl)
	endStoreSpan(span, err)
	return err
}

func (s *tracedStore) Release(ctx context.Context, key, token string) error {
	ctx, span := s.start(ctx, SpanStoreRelease, key)
	err := s.next.Release(ctx, key, token)
	endStoreSpan(span, err)
	return err
}

// Delete is the store's Delete, which the handler uses to forget the
// tombstone of an expired key; not traced.
func (s *tracedStore) Delete(ctx context.Context, key string) error {
	d, ok := s.next.(interface {
		Delete(ctx context.Context, key string) error
	})
	if !ok {
		return fmt.Errorf("delete: %w", store.ErrUnavailable)
	}
	return d.Delete(ctx, key)
}

// Inspect is the store's Inspect, which the handler uses to read the
// marker of a key whose unknown outcome is being settled; not traced.
func (s *tracedStore) Inspect(ctx context.Context, key string) (store.Entry, error) {
	i, ok := s.next.(interface {
		Inspect(ctx context.Context, key string) (store.Entry, error)
	})
	if !ok {
		return store.Entry{}, fmt.Errorf("inspect: %w", store.ErrUnavailable)
	}
	return i.Inspect(ctx, key)
}

func endStoreSpan(span trace.Span, err error) {
	if err != nil {
		kind := "_OTHER"
		switch {
		case errors.Is(err, store.ErrLockLost):
			kind = "lock_lost"
		case errors.Is(err, store.ErrUnavailable):
			kind = "unavailable"
		}
		span.SetAttributes(semconv.ErrorTypeKey.String(kind))
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
