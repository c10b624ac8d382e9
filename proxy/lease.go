package proxy

import (
	"context"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution"
)

// An executed request holds its lease (execution.Lease): its renewals
// extend its key with its token, arm its deadline, and report a loss or a
// failure on its route.
var _ execution.Holder = (*request)(nil)

// Extend renews q's lease in the store.
func (q *request) Extend(ctx context.Context, ttl time.Duration) error {
	return q.h.store.Extend(ctx, q.keyHash, q.token, ttl)
}

// RenewLease starts the renewals of q's lease for its deadline
// (execution.Call): from a timer, the first time after first and then
// every execution.RenewEvery of the route's lock_ttl; with thenDeadline
// the first renewal arms the call's deadline (FirstRenewal).
func (q *request) RenewLease(first time.Duration, thenDeadline bool) {
	q.lease.Renew(q.detached, q.h.clock, q, q.route.policy.LockTTL, first, thenDeadline)
}

// FirstRenewal arms q's deadline, due when its client's wait (wait, execute.go)
// ends after the call started, when the first renewal, due after first,
// fires before it.
func (q *request) FirstRenewal(first time.Duration) {
	q.call.ArmAfterRenewal(first)
}

// Lost reports a renewal that found q's lease lost.
func (q *request) Lost() { q.h.lockLost(q, "renewal", execution.LostWhileRunning) }

// RenewFailed logs a renewal of q's lease that failed.
func (q *request) RenewFailed(err error) {
	q.h.log.Warn("could not renew lease", "route", q.route.label, "key_hash", q.keyHash, "error", err)
}

// lockLost reports q's lease found lost during an operation.
func (h *Handler) lockLost(q *request, during, msg string) {
	h.settler.Lost(q.route.label, q.keyHash, q.route.policy.LockTTL, during, msg)
}
