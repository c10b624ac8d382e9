package proxy

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// The marker of a key being settled (reconcile.go): written before the
// first lookup, read by the next owner of the key, which then takes the
// settlement over instead of forwarding the key, and by retries in flight.

// markReconciling writes q's key's marker, unless one is there.
func (h *Handler) markReconciling(ctx context.Context, q *request) bool {
	mk := q.keyHash + ReconcileSuffix
	lease := store.Lease{Fingerprint: q.fp, Request: q.desc, Instance: h.instance}
	res, err := h.store.Begin(ctx, mk, lease, q.route.policy.LockTTL)
	switch {
	case err != nil:
		return false
	case res.State == store.Completed:
		return true // a proxy before this one wrote it
	case res.State != store.Acquired:
		return false
	}
	pol := &q.route.policy
	marker := &store.Record{Status: http.StatusAccepted, Header: map[string][]string{}, Fingerprint: q.fp,
		CreatedAt: q.recon.since.Truncate(time.Millisecond).UTC(), Request: q.desc}
	// Kept while lookups may run, and as long as a kept 502 would be.
	return h.store.Complete(ctx, mk, res.Token, marker, pol.Reconcile.For+pol.TTL) == nil
}

// dropMarker deletes the marker of a settled key. One left behind costs a
// lookup once the key's record expires, never an execution.
func (h *Handler) dropMarker(ctx context.Context, q *request) {
	if h.forgetter == nil {
		return
	}
	if err := h.forgetter.Delete(ctx, q.keyHash+ReconcileSuffix); err != nil && !errors.Is(err, store.ErrNotFound) {
		h.log.Warn("could not delete the marker of a settled key", "route", q.route.label, "key_hash", q.keyHash, "error", err)
	}
}

// inspector reads one key, as the operator API does.
type inspector interface {
	Inspect(ctx context.Context, key string) (store.Entry, error)
}

// marker reads the marker of q's key: its record, nil when there is none.
func (h *Handler) marker(ctx context.Context, q *request) (*store.Record, error) {
	if h.inspector == nil {
		return nil, nil
	}
	e, err := h.inspector.Inspect(ctx, q.keyHash+ReconcileSuffix)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	case e.State != store.Completed || e.Record == nil:
		return nil, nil
	}
	return e.Record, nil
}

// takeOver is a key this proxy just took on a reconciling route: when its
// marker says an earlier owner was settling its outcome (and died, or lost
// its lease), this request settles it by lookups instead of forwarding
// it. It reports whether it did; false means the request executes as new.
func (h *Handler) takeOver(w http.ResponseWriter, q *request, detached context.Context) bool {
	m, err := h.marker(detached, q)
	if err != nil {
		// Unknown whether an outcome is being settled: forwarding could
		// execute twice. Give the lease back; on_store_error decides.
		_ = h.store.Release(detached, q.keyHash, q.token)
		h.storeUnavailable(w, q, err)
		return true
	}
	if m == nil {
		return false
	}
	if m.Fingerprint != q.fp {
		_ = h.store.Release(detached, q.keyHash, q.token)
		h.refuse(w, q, failMismatch, nil)
		return true
	}
	if !h.detachable.take(settlementSize(q)) {
		// No room to settle it here now: the lease is given back, and a
		// later retry takes the key over again.
		_ = h.store.Release(detached, q.keyHash, q.token)
		h.refuse(w, q, failInFlightSettling, nil)
		return true
	}
	h.log.Warn("key taken over while its outcome was being settled: asking the upstream, not forwarding",
		"route", q.route.label, "key_hash", q.keyHash, "since", m.CreatedAt)
	q.executed = true
	h.settling.Add(1)
	q.done = h.owners.add(q.keyHash, func() {})
	q.detached = detached
	q.startLease()
	q.recon = &reconciliation{target: q.probeTarget, since: m.CreatedAt, done: make(chan struct{})}
	q.recon.client = true
	q.recon.waiting.Store(true)
	// The first lookup is due when it was for the earlier owner.
	first := max(m.CreatedAt.Add(q.route.policy.Reconcile.After).Sub(h.clock.Now()), time.Millisecond)
	go h.reconcile(q, first)
	h.awaitSettlement(w, q)
	return true
}

// settlingElsewhere reports whether the marker of q's key, held in flight,
// is there: its outcome is being settled, not run.
func (h *Handler) settlingElsewhere(ctx context.Context, q *request) bool {
	m, err := h.marker(ctx, q)
	return err == nil && m != nil
}
