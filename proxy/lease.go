package proxy

import (
	"context"
	"errors"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// An executed request holds its lease (execution.Lease): its renewals
// extend its key with its token, arm its deadline, and report a loss or a
// failure on its route.
var _ execution.Holder = (*request)(nil)

// renewLease renews q's lease from a timer, the first time after first and
// then every execution.RenewEvery of the route's lock_ttl; with
// thenDeadline the first renewal arms the call's deadline (FirstRenewal).
func (h *Handler) renewLease(ctx context.Context, q *request, first time.Duration, thenDeadline bool) {
	q.lease.Renew(ctx, h.clock, q, q.route.policy.LockTTL, first, thenDeadline)
}

// Extend renews q's lease in the store.
func (q *request) Extend(ctx context.Context, ttl time.Duration) error {
	return q.h.store.Extend(ctx, q.keyHash, q.token, ttl)
}

// FirstRenewal arms q's deadline, due when its client's wait (wait, grpc.go)
// ends after the call started, when the first renewal, due after first,
// fires before it.
func (q *request) FirstRenewal(first time.Duration) {
	q.h.armDeadline(q, q.h.wait(q)-first)
}

// Lost reports a renewal that found q's lease lost.
func (q *request) Lost() { q.h.lockLost(q, "renewal", lostWhileRunning) }

// RenewFailed logs a renewal of q's lease that failed.
func (q *request) RenewFailed(err error) {
	q.h.log.Warn("could not renew lease", "route", q.route.label, "key_hash", q.keyHash, "error", err)
}

// renewHeld extends the lease of a key held for lack of space and reports
// whether the lease was lost.
func (h *Handler) renewHeld(ctx context.Context, q *request) (lost bool) {
	ttl := q.route.policy.LockTTL
	sent := h.clock.Now()
	err := h.store.Extend(ctx, q.keyHash, q.token, ttl)
	switch {
	case err == nil:
		q.lease.ExtendTo(sent.Add(ttl))
	case errors.Is(err, store.ErrLockLost):
		h.lockLost(q, "renewal while the store was full", lostAfterDelivered)
		return true
	default:
		h.log.Warn("could not renew lease of a key held while the store is full", "route", q.route.label, "key_hash", q.keyHash, "error", err)
	}
	return false
}

// Lost-lease messages, by when the loss is found: a renewal finds it while
// the upstream still runs, before any response exists; a completion after
// the response went to the client.
const (
	lostWhileRunning   = "lease on key lost while its upstream request runs: it expired, or an operator deleted it, and another request may execute it; this request's response will be delivered but not recorded"
	lostAfterDelivered = "lease on key lost: it expired, or an operator deleted it, while the upstream ran, and another request may have executed it; this response was delivered but not recorded"
)

func (h *Handler) lockLost(q *request, during, msg string) {
	h.metrics.lockLost.Inc()
	h.log.Warn(msg, "route", q.route.label, "key_hash", q.keyHash, "during", during, "lock_ttl", q.route.policy.LockTTL.String())
}
