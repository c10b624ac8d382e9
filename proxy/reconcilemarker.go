package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// The marker of a key being settled (reconcile.go): written before the
// first lookup, read by the next owner of the key, which then takes the
// settlement over instead of forwarding the key, and by retries in flight.

// markerResentAt is the marker's field that says when the original
// request was sent again (RFC 3339): a key whose resend went out is never
// resent by its next owner, which waits reconcile.after from then before
// it asks.
const markerResentAt = "Resent-At"

// markerLookup is the marker's field that holds the lookup's target as
// filled from the request whose outcome is unknown: the key's next owner
// asks about that request, not about the retry that took the key over,
// whose headers (an X-Request-Id set anew for each attempt) need not be
// the same.
const markerLookup = "Lookup"

// markerPending is the marker's field set while the request it names is
// sent, its outcome not yet known (markPending): a retry meanwhile is
// told the key is in flight, not being settled, and the key's next owner
// asks the upstream as it would about an unknown outcome.
const markerPending = store.MarkerPending

// markPending writes q's key's marker before its request is forwarded on
// a route that settles unknown outcomes: a proxy killed while the
// upstream runs the request leaves a marked key, which its next owner
// asks the upstream about instead of forwarding again. A key that cannot
// be marked is not forwarded: the lease is given back and on_store_error
// decides, as when the store is down. A store full (store.ErrFull) is
// answered as a full store answers a new key under fail_closed, whatever
// on_store_error says: 503 store-full, never forwarded (markerFull).
func (h *Handler) markPending(ctx context.Context, w http.ResponseWriter, q *request) bool {
	at := h.clock.Now()
	err := h.writeMarker(ctx, q, at, time.Time{}, true)
	if err == nil {
		q.pending = at.Truncate(time.Millisecond)
		return true
	}
	_ = h.store.Release(ctx, q.keyHash, q.token)
	if errors.Is(err, store.ErrFull) && q.route.policy.Mode != ModeShadow {
		h.markerFull(w, q, err)
		return false
	}
	h.storeUnavailable(w, q, errNotMarked)
	return false
}

// errNotMarked is why a key that could not be marked before it was sent
// is not forwarded (markPending).
var errNotMarked = fmt.Errorf("mark the key before forwarding it: %w", store.ErrUnavailable)

// errMarkerTaken is a marker write that found the key's marker there
// already, or being written: another request's settlement.
var errMarkerTaken = errors.New("the key's marker is another settlement's")

// markerFull refuses q, whose key the store had room to lease but not to
// mark (store.ErrFull): 503 store-full, as a full store answers a new key
// under fail_closed, and under fail_open too. fail_open forwards what the
// store cannot protect at all; this key it could lease, and forwarded
// unmarked a proxy killed while the upstream runs it would leave its next
// owner to execute it again, on a route that asks for unknown outcomes to
// be settled, never guessed.
func (h *Handler) markerFull(w http.ResponseWriter, q *request, err error) {
	if ok, n := h.refuseLog.Allow(h.clock.Now()); ok {
		h.log.Warn("store full: no room to mark the key before forwarding it, rejecting request whatever on_store_error says",
			"route", q.route.label, "key_hash", q.keyHash, "store_full", true, "error", err, "suppressed", n)
	}
	h.refuse(w, q, failStoreFull, fmt.Errorf("mark the key before forwarding it: %w", err))
}

// markReconciling writes q's key's marker, unless one is there, once a
// renewal proved the key still held: a proxy that lost the key must not
// mark it for its new owner. The marker written before the request was
// sent (markPending) is written anew, so that it says since when the
// outcome is unknown and that it is being settled.
func (h *Handler) markReconciling(ctx context.Context, q *request) bool {
	if held, _ := q.settle.RenewUnknown(ctx, &h.settler); !held {
		return false
	}
	if !q.pending.IsZero() {
		if h.forgetter == nil {
			return false
		}
		if err := h.forgetter.Delete(ctx, q.keyHash+ReconcileSuffix); err != nil && !errors.Is(err, store.ErrNotFound) {
			return false // the pending marker stays: the next owner asks
		}
		q.pending = time.Time{}
	}
	return h.writeMarker(ctx, q, q.recon.since, time.Time{}, false) == nil
}

// markLeft writes the marker of q's key, which this process leaves to its
// next owner with the upstream still running it (a shutdown mid-call).
func (h *Handler) markLeft(ctx context.Context, q *request) bool {
	return h.writeMarker(ctx, q, h.clock.Now(), time.Time{}, false) == nil
}

// markResent rewrites q's marker to say the original request is being
// sent again, and reports whether the marker says so: only then may it
// be sent. The marker is deleted and written anew while this proxy holds
// the key (renewed just before), so no other proxy can take the key over
// in between; one in flight reads as a marker (takeOver).
func (h *Handler) markResent(ctx context.Context, q *request, at time.Time) bool {
	if h.forgetter == nil {
		return false
	}
	if err := h.forgetter.Delete(ctx, q.keyHash+ReconcileSuffix); err != nil && !errors.Is(err, store.ErrNotFound) {
		return false
	}
	if h.writeMarker(ctx, q, q.recon.since, at, false) != nil {
		h.log.Error("could not mark the key as resent: it is not resent until it is",
			"route", q.route.label, "key_hash", q.keyHash)
		return false
	}
	return true
}

// writeMarker writes q's key's marker, since the outcome became unknown
// (or, pending, since the request was sent), and resent when the original
// request went out again (zero: not yet). It returns why it did not: the
// store's error (store.ErrFull when it has no room), or errMarkerTaken.
func (h *Handler) writeMarker(ctx context.Context, q *request, since, resent time.Time, pending bool) error {
	mk := q.keyHash + ReconcileSuffix
	lease := store.Lease{Fingerprint: q.fp, Request: q.desc, Instance: h.instance}
	res, err := h.store.Begin(ctx, mk, lease, q.route.policy.LockTTL)
	switch {
	case err != nil:
		return err
	case res.State == store.Completed:
		// A proxy before this one wrote it; before a request is sent,
		// one there is another's settlement, not to be forwarded over.
		if resent.IsZero() && !pending {
			return nil
		}
		return errMarkerTaken
	case res.State != store.Acquired:
		return errMarkerTaken
	}
	pol := &q.route.policy
	target := q.probeTarget // a shutdown's marker: nothing settles it yet
	if q.recon != nil {
		target = q.recon.target
	}
	hdr := map[string][]string{markerLookup: {target}}
	if pending {
		hdr[markerPending] = []string{"true"}
	}
	if !resent.IsZero() {
		hdr[markerResentAt] = []string{resent.UTC().Format(time.RFC3339Nano)}
	}
	marker := &store.Record{Status: http.StatusAccepted, Header: hdr, Fingerprint: q.fp,
		CreatedAt: since.Truncate(time.Millisecond).UTC(), Request: q.desc}
	// Kept while lookups may run, a resend with them, and as long as a
	// kept 502 would be.
	ttl := pol.Reconcile.For + h.maxExecution + pol.TTL
	if err := h.store.Complete(ctx, mk, res.Token, marker, ttl); err != nil {
		if pending {
			// The request is not sent: nothing is being settled, and a
			// retry must not be told it is.
			_ = h.store.Release(ctx, mk, res.Token)
		}
		return err
	}
	return nil
}

// resentAt is when the original request was sent again, by the marker m;
// zero when it was not.
func resentAt(m *store.Record) time.Time {
	v := m.Header[markerResentAt]
	if len(v) == 0 {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, v[0])
	if err != nil {
		// Unreadable, so possibly resent: never resent again, and
		// asked after reconcile.after from now.
		return time.Now()
	}
	return t
}

// lookupOf is the lookup's target the marker m names; target, the one
// filled from the request in hand, when m names none (a marker written
// before markers held it).
func lookupOf(m *store.Record, target string) string {
	if v := m.Header[markerLookup]; len(v) == 1 && v[0] != "" {
		return v[0]
	}
	return target
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

// dropOwnMarker deletes the marker of q's key once its record is written,
// if the marker is this settlement's (written when its outcome became
// unknown): another's is left alone.
func (h *Handler) dropOwnMarker(ctx context.Context, q *request) {
	m, _, err := h.marker(ctx, q)
	if err != nil || m == nil {
		return
	}
	if !m.CreatedAt.Equal(q.recon.since.Truncate(time.Millisecond)) && !m.CreatedAt.Equal(q.pending) {
		return
	}
	h.dropMarker(ctx, q)
}

// dropPending deletes the marker written before q's request was sent
// (markPending), once its record is written: the key is completed, and no
// other request can take it, so nothing is read first and it costs one
// store operation. One left behind by a failed delete costs a lookup once
// the record expires, never an execution.
func (h *Handler) dropPending(ctx context.Context, q *request) {
	if q.pending.IsZero() {
		return
	}
	q.pending = time.Time{}
	h.dropMarker(ctx, q)
}

// dropPendingHeld deletes the marker written before q's request was sent
// (markPending) before its key is released, once the key is proven still
// q's (dropHeldMarker).
func (h *Handler) dropPendingHeld(ctx context.Context, q *request) {
	if q.pending.IsZero() {
		return
	}
	q.pending = time.Time{}
	h.dropHeldMarker(ctx, q)
}

// dropHeldMarker deletes the marker of q's key, which q is about to
// release, once a renewal of q's lease proves the key still q's. A key
// lost without a renewal finding it — its lease ran out while the
// upstream ran, the store restarted, an operator deleted it — may be
// another request's by now, and the marker there that request's: deleted,
// a proxy killed while the upstream runs that request would leave the
// key unmarked, and its next owner would execute it again. A renewal the
// store does not answer leaves the marker too: it costs the key's next
// owner a lookup, never an execution. What remains is the time between the
// renewal and the delete, one store operation: the lease, just renewed,
// would have to run out within it, as for any write fenced by a lease
// (docs/request-handling.md, "Unknown outcomes: asking the upstream").
func (h *Handler) dropHeldMarker(ctx context.Context, q *request) {
	sent := h.clock.Now()
	if err := h.store.Extend(ctx, q.keyHash, q.token, q.route.policy.LockTTL); err != nil {
		h.log.Warn("could not prove the key still held before deleting its marker: the marker is left, and the key's next owner asks the upstream",
			"route", q.route.label, "key_hash", q.keyHash, "error", err)
		return
	}
	q.lease.ExtendTo(sent.Add(q.route.policy.LockTTL))
	h.dropMarker(ctx, q)
}

// inspector reads one key, as the operator API does.
type inspector interface {
	Inspect(ctx context.Context, key string) (store.Entry, error)
}

// marker reads the marker of q's key: its record, nil when there is none.
// writing reports a marker being written (in flight), which says as much
// as a written one: the outcome is being settled.
func (h *Handler) marker(ctx context.Context, q *request) (m *store.Record, writing bool, err error) {
	if h.inspector == nil {
		return nil, false, nil
	}
	e, err := h.inspector.Inspect(ctx, q.keyHash+ReconcileSuffix)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	case e.State != store.Completed || e.Record == nil:
		return nil, true, nil
	}
	return e.Record, false, nil
}

// takeOver is a key this proxy just took on a reconciling route: when its
// marker says an earlier owner was settling its outcome (and died, or lost
// its lease), this request settles it by lookups instead of forwarding
// it. It reports whether it did; false means the request executes as new.
func (h *Handler) takeOver(w http.ResponseWriter, q *request, detached context.Context) bool {
	m, writing, err := h.marker(detached, q)
	if err != nil {
		// Unknown whether an outcome is being settled: forwarding could
		// execute twice. Give the lease back; on_store_error decides.
		_ = h.store.Release(detached, q.keyHash, q.token)
		h.storeUnavailable(w, q, err)
		return true
	}
	if writing {
		// Its outcome is being settled, by a proxy that is writing the
		// marker or died doing so: never forwarded.
		_ = h.store.Release(detached, q.keyHash, q.token)
		h.refuse(w, q, failInFlightSettling, nil)
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
	q.reserved = detachedRoom(q)
	if !h.detachable.Take(q.reserved) {
		// No room to settle it here now: the lease is given back, and a
		// later retry takes the key over again.
		_ = h.store.Release(detached, q.keyHash, q.token)
		h.refuse(w, q, failInFlightSettling, nil)
		return true
	}
	h.log.Warn("key taken over while its outcome was being settled: asking the upstream, not forwarding",
		"route", q.route.label, "key_hash", q.keyHash, "since", m.CreatedAt)
	q.executed, q.h = true, h
	h.settling.Add(1)
	q.done = h.owners.Add(q.keyHash, func(error) {})
	q.detached = detached
	q.startLease()
	// The request that was sent is the one asked about, and the marker
	// this settlement rewrites names it still.
	q.recon = &reconciliation{target: lookupOf(m, q.probeTarget), since: m.CreatedAt, resent: resentAt(m), done: make(chan struct{})}
	if len(m.Header[markerPending]) > 0 {
		// Written before the request was sent: marked anew as being
		// settled (markReconciling), its time kept.
		q.pending = m.CreatedAt
	}
	q.recon.client = true
	q.recon.waiting.Store(true)
	// The first lookup is due when it was for the earlier owner: after
	// the outcome became unknown, or after its resend went out.
	from := m.CreatedAt
	if !q.recon.resent.IsZero() {
		from = q.recon.resent
	}
	first := max(from.Add(q.route.policy.Reconcile.After).Sub(h.clock.Now()), time.Millisecond)
	go h.reconcile(q, first)
	h.awaitSettlement(w, q)
	return true
}

// settlingElsewhere reports whether the marker of q's key, held in flight,
// is there: its outcome is being settled, not run.
func (h *Handler) settlingElsewhere(ctx context.Context, q *request) bool {
	m, writing, err := h.marker(ctx, q)
	return err == nil && (m != nil && len(m.Header[markerPending]) == 0 || writing)
}
