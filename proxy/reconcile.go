package proxy

import (
	"context"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Under on_upstream_error: reconcile, an unknown outcome — a failure after
// the request was sent, or one of ambiguous_statuses — is not guessed: the
// key's lease is kept and renewed while the proxy asks the upstream what
// happened, with the route's lookup (reconcile.request), until an answer
// settles it (docs/request-handling.md, "Unknown outcomes"):
//
//   - found: the lookup's answer is recorded as the key's, and replayed
//     with Idempotency-Reconciled: true;
//   - absent: the original request is forwarded once more (resend), or the
//     key released;
//   - neither within reconcile.for: reconcile.then.
//
// Entering reconciliation writes a marker, a small record under the key's
// storage key + ReconcileSuffix, before the first lookup, so that whichever
// proxy takes the key next — after this one was killed and its lease ran
// out — looks the outcome up instead of forwarding the key again. The
// marker is an ordinary record, so it is kept by every store and sealed by
// the encryption layer like any other.

// ReconcileSuffix ends the storage key of the marker of a key whose outcome
// is being settled: the marker of key k is a record under k +
// ReconcileSuffix.
const ReconcileSuffix = store.ReconcileSuffix

// IdempotencyReconciled marks a replay whose answer came from the
// upstream's lookup rather than from the original request.
const IdempotencyReconciled = "Idempotency-Reconciled"

// Outcomes of a settlement, in idempotency_proxy_requests_total.
const (
	OutcomeReconciledFound  Outcome = "reconciled_found"  // the lookup found the effect: its answer recorded
	OutcomeReconciledAbsent Outcome = "reconciled_absent" // the lookup found none: resent, or released
	OutcomeReconcileGaveUp  Outcome = "reconcile_gave_up" // no lookup settled it within reconcile.for: then
)

// Results of one lookup, the values of the "result" label of
// idempotency_proxy_reconcile_probes_total.
const (
	probeFound   = "found"
	probeAbsent  = "absent"
	probeUnknown = "unknown" // another status
	probeError   = "error"   // no answer within its deadline, or a failed connection
)

var probeResults = []string{probeFound, probeAbsent, probeUnknown, probeError}

// reconciliation is the settling of one key's unknown outcome, shared by
// the goroutine that settles it and the client waiting for it.
type reconciliation struct {
	// target is the lookup's path and query, filled at the original
	// request (probeTemplate.fill).
	target string
	since  time.Time // when the outcome became unknown (the marker's time)
	// resent is when the original request was sent again, by this proxy
	// or, per the marker, an earlier owner; zero when it was not.
	resent time.Time
	probes atomic.Int64
	// client is set when a client waits for the answer (awaitSettlement),
	// before anyone reads it.
	client bool
	// waiting is set while the first caller waits for the answer; whoever
	// clears it decides who counts the settlement: the caller that gets
	// it, or the settling goroutine when nobody took it.
	waiting atomic.Bool
	done    chan struct{} // closed once settled; result is set before
	result  settlement
}

// settlement is what a key's reconciliation came to.
type settlement struct {
	outcome Outcome
	// rec is the key's record (found, resent, or the 502 of then: keep);
	// nil when the key was released or lost to another owner.
	rec *store.Record
	// lost is set when the lease was lost: another owner settles the key.
	lost bool
}

// reconcileProbe compiles p's lookup, which Policy.Check has parsed, and
// the headers it copies: reconcile.headers, else the scope headers; of a
// cookie scope, only its cookies, never the rest of the Cookie header.
func reconcileProbe(p Policy, scope []ScopeHeader) (t *probeTemplate, names, cookies []string) {
	t, err := parseProbeTemplate(p.Reconcile.Request)
	if err != nil {
		return nil, nil, nil
	}
	for _, h := range p.Reconcile.Headers {
		names = append(names, http.CanonicalHeaderKey(h))
	}
	if len(names) == 0 {
		for _, s := range scope {
			if s.Cookie != "" {
				cookies = append(cookies, s.Cookie)
				continue
			}
			if !slices.Contains(names, s.Header) {
				names = append(names, s.Header)
			}
		}
	}
	return t, names, cookies
}

// reconciles reports whether unknown outcomes are settled with a lookup.
func (t *terms) reconciles() bool { return t.probe != nil }

// startReconcile keeps q's key, whose outcome is unknown, and settles it in
// the background; the client, if still there, waits for the answer
// (awaitSettlement). It returns the outcome the call reports meanwhile.
func (h *Handler) startReconcile(q *request) Outcome {
	q.recon = &reconciliation{target: q.probeTarget, since: h.clock.Now(), done: make(chan struct{})}
	c := &q.capture
	c.mu.Lock() // the call ended: the client can no longer be let go
	detached := c.detached
	q.recon.client = !detached && c.wroteClient == 0
	c.mu.Unlock()
	q.recon.waiting.Store(q.recon.client)
	if detached {
		// The call holds the room its settlement needs (detachedRoom):
		// the settlement keeps it, and the call does not give it back
		// (detachedEnded). Taking room before the call gives its own
		// back would count the key twice — under upstream.max_detached:
		// 1 no detached call could be settled at once —, and giving it
		// back first would let another call take it in between.
		q.roomKept = true
	} else {
		q.reserved = detachedRoom(q)
		if !h.detachable.Take(q.reserved) {
			h.leaveToNextOwner(q)
			return OutcomeUpstreamError
		}
	}
	go h.reconcile(q, q.route.policy.Reconcile.After)
	return OutcomeUpstreamError
}

// leaveToNextOwner marks q's key as being settled and leaves its lease to
// expire at lock_ttl, without lookups here: settlements share the room of
// detached calls (upstream.max_detached, upstream.max_detached_bytes),
// and past it the next request with the key, once the lease expired, takes
// it over and asks (takeOver). Nothing is held meanwhile, and the key is
// never forwarded again.
func (h *Handler) leaveToNextOwner(q *request) {
	h.metrics.detachRefused.Inc()
	// Left only once marked: a plain lease would have the key's next
	// owner forward it again. A store that fails the write is asked again
	// for one lock_ttl, the lease renewed meanwhile, as a record is; the
	// last try comes after the lease a failed write left on the marker
	// (writeMarker) has run out.
	marked := h.markReconciling(q.detached, q)
	for until := h.clock.Now().Add(q.route.policy.LockTTL); !marked && h.clock.Now().Before(until); {
		if q.settle.HoldFor(q.detached, &h.settler, execution.RenewEvery(q.route.policy.LockTTL)) {
			break
		}
		marked = h.markReconciling(q.detached, q)
	}
	h.log.Warn("too many unknown outcomes being settled (upstream.max_detached, upstream.max_detached_bytes): this key is left to its next request after lock_ttl",
		"route", q.route.label, "key_hash", q.keyHash, "marked", marked, "lock_ttl", q.route.policy.LockTTL.String())
	q.recon.waiting.Store(false)
	close(q.recon.done) // result empty: the client hears it is being settled
	h.settled(q)
}

// reconcile settles q's key: marker, lookups, then the record or release.
// It holds the room startReconcile or takeOver took, or the detached call
// kept for it (q.reserved), and gives it back once the key is settled.
func (h *Handler) reconcile(q *request, first time.Duration) {
	h.reconciling.Store(q.keyHash, q.recon)
	defer h.settled(q)
	defer h.detachable.Give(q.reserved)
	defer h.reconciling.CompareAndDelete(q.keyHash, q.recon)
	ctx := q.detached
	res := h.settle(ctx, q, first)
	h.log.Info("unknown outcome settled", "route", q.route.label, "key_hash", q.keyHash,
		"outcome", string(res.outcome), "probes", q.recon.probes.Load())
	if res.rec != nil {
		// A release dropped it before releasing (releaseSettled).
		h.dropOwnMarker(ctx, q)
	}
	r := q.recon
	r.result = res
	if !r.waiting.CompareAndSwap(true, false) && res.outcome != "" {
		// Nobody took the answer: the settlement is counted here.
		q.route.metrics.observe(res.outcome, time.Since(q.start))
	}
	close(r.done)
}

// settle runs the lookups until one settles the key, or reconcile.for
// passes after one was sent. An empty outcome means the lease was lost: another owner
// settles the key.
//
// The original request is sent again at most once per key, whichever
// proxy settles it: the marker says when it was (markResent), and a
// resend whose own outcome is unknown is asked about reconcile.after
// later, as the original was; an absent answer after a resend is not
// final (it may still commit), so it goes to reconcile.then.
func (h *Handler) settle(ctx context.Context, q *request, wait time.Duration) settlement {
	pol := &q.route.policy.Reconcile
	marked := h.markReconciling(ctx, q)
	if !marked {
		// Tried again before each lookup; until it is written, a proxy
		// that takes the key after this one could forward it again.
		h.log.Error("could not mark the key as being settled: if this process dies before it is, the key executes again after lock_ttl",
			"route", q.route.label, "key_hash", q.keyHash)
	} else {
		h.log.Warn("upstream outcome unknown: the key is marked as being settled, and the upstream is asked",
			"route", q.route.label, "key_hash", q.keyHash, "after", wait.String())
	}
	deadline := q.recon.since.Add(pol.For)
	for {
		if lost := q.settle.HoldFor(ctx, &h.settler, wait); lost {
			return settlement{lost: true}
		}
		wait = pol.Every
		if !marked {
			marked = h.markReconciling(ctx, q)
		}
		// Asked at least once, whatever the time: a key taken over after
		// reconcile.for passed (its settling proxy died, its client came
		// back late) was not settled by a lookup, it was not asked.
		if !h.clock.Now().Before(deadline) && q.recon.probes.Load() > 0 {
			return h.giveUp(ctx, q)
		}
		result, rec := h.probe(ctx, q)
		switch {
		case result == probeFound:
			return h.record(ctx, q, rec, OutcomeReconciledFound)
		case result == probeAbsent && !q.recon.resent.IsZero():
			return h.giveUp(ctx, q)
		case result == probeAbsent && pol.Resend && marked:
			rec, sent, released := h.resend(ctx, q)
			switch {
			case rec != nil:
				return h.record(ctx, q, rec, OutcomeReconciledAbsent)
			case released:
				// Not processed, the upstream answered (release_statuses),
				// as the lookup said: released, as that answer releases
				// any request's key.
				return h.releaseWithin(ctx, q, OutcomeReconciledAbsent)
			case sent:
				// Unknown again: its work may outlive the connection.
				wait = pol.After
			}
		case result == probeAbsent && !pol.Resend:
			if h.releaseSettled(ctx, q) {
				return settlement{outcome: OutcomeReconciledAbsent}
			}
		}
	}
}

// record stores rec as q's key's record, trying again while the store is
// unavailable, as settleKey does for any record, and for as long: one
// lock_ttl, the longest the operator lets a key stay locked for an owner
// that no longer answers. A record the store refused (store.ErrRefused: a
// constraint, a trigger) is refused again, and is not held for at all.
// Either way the key is let go only once its marker is in place: the
// lease is left to run out, and the marker has the key's next owner ask
// the upstream again. Without a marker the next owner would forward the
// key, so it stays held until the store takes one or the other.
func (h *Handler) record(ctx context.Context, q *request, rec *store.Record, outcome Outcome) settlement {
	rec.Request, rec.Lookup = q.desc, q.lookup()
	if q.route.policy.ExpiredKeys == ExpiredReject {
		rec.Tombstone = q.route.policy.ExpiredKeyWindow
	}
	q.settle.Rec, q.settle.TTL, q.settle.From = rec, q.route.policy.ttlFor(rec.Status), time.Time{}
	holdUntil := h.clock.Now().Add(q.route.policy.LockTTL)
	for !q.settle.Try(ctx, &h.settler, false) {
		if (q.settle.Refused || !h.clock.Now().Before(holdUntil)) && h.markReconciling(ctx, q) {
			msg := "the store did not take the settled answer's record within lock_ttl: the key is left to its next request after lock_ttl"
			if q.settle.Refused {
				msg = "the store refused the settled answer's record: the key is left to its next request after lock_ttl"
			}
			h.log.Warn(msg, "route", q.route.label, "key_hash", q.keyHash, "lock_ttl", q.route.policy.LockTTL.String())
			return settlement{}
		}
		if q.settle.HoldFor(ctx, &h.settler, time.Second) {
			return settlement{lost: true}
		}
	}
	if q.settle.RecordLost {
		// The store refused it: the key is another owner's, whose
		// record, not this one, is the key's answer.
		return settlement{lost: true}
	}
	return settlement{outcome: outcome, rec: q.settle.Rec}
}

// releaseSettled releases q's key, and reports whether it did. The marker
// goes first, while the key is proven held (dropHeldMarker): once
// released, or lost, the key may be another request's, whose outcome may
// become unknown and be marked anew, and that marker must not be deleted
// by this settlement.
func (h *Handler) releaseSettled(ctx context.Context, q *request) bool {
	h.dropHeldMarker(ctx, q)
	return q.settle.TryRelease(ctx, &h.settler)
}

// giveUp applies reconcile.then: no lookup settled the key within
// reconcile.for.
func (h *Handler) giveUp(ctx context.Context, q *request) settlement {
	h.log.Error("no lookup settled the unknown outcome within reconcile.for: applying reconcile.then",
		"route", q.route.label, "key_hash", q.keyHash, "then", q.route.policy.Reconcile.Then.String(), "probes", q.recon.probes.Load())
	if q.route.policy.Reconcile.Then == ThenRelease {
		return h.releaseWithin(ctx, q, OutcomeReconcileGaveUp)
	}
	p, detail, _ := failureProblem(failUpstream, nil)
	return h.record(ctx, q, problemRecord(p, detail, q.fp), OutcomeReconcileGaveUp)
}

// releaseWithin releases q's key, settled with outcome and no record. It
// is tried for one lock_ttl, as a record is (record): a store that takes
// the renewals but never the release would otherwise hold the key for
// ever. Left to run out, the lease releases it too.
func (h *Handler) releaseWithin(ctx context.Context, q *request, outcome Outcome) settlement {
	holdUntil := h.clock.Now().Add(q.route.policy.LockTTL)
	for !h.releaseSettled(ctx, q) {
		if !h.clock.Now().Before(holdUntil) {
			h.log.Warn("the store did not take the key's release within lock_ttl: the key unlocks at its lease's end",
				"route", q.route.label, "key_hash", q.keyHash, "lock_ttl", q.route.policy.LockTTL.String())
			break
		}
		if q.settle.HoldFor(ctx, &h.settler, time.Second) {
			return settlement{lost: true}
		}
	}
	return settlement{outcome: outcome}
}

// Settling reports whether this process is settling the unknown outcome
// of the key with storage key keyHash, since when, and how many lookups it
// sent: what the key API shows of a key being settled.
func (h *Handler) Settling(keyHash string) (since time.Time, probes int64, ok bool) {
	v, ok := h.reconciling.Load(keyHash)
	if !ok {
		return time.Time{}, 0, false
	}
	r := v.(*reconciliation)
	return r.since, r.probes.Load(), true
}

// awaitSettlement gives the client of a key being settled its answer, if
// it comes within upstream.timeout of when the request took the key;
// otherwise a 502 that says the outcome is being settled and a retry will
// get it. The wait is timed on the handler's clock from q.began, as the
// key's lease and its upstream call's deadline are: q.start is the access
// log's wall time, another clock.
func (h *Handler) awaitSettlement(w http.ResponseWriter, q *request) {
	r := q.recon
	left := q.began.Add(h.upstreamTimeout).Sub(h.clock.Now())
	select {
	case <-r.done:
	case <-h.clock.After(max(left, 0)):
		if r.waiting.CompareAndSwap(true, false) {
			h.refuse(w, q, failSettling, nil)
			return
		}
		<-r.done // settled meanwhile: its answer is this client's
	case <-q.in.Context().Done():
		if r.waiting.CompareAndSwap(true, false) {
			q.outcome = OutcomeUpstreamError
			return
		}
		<-r.done
	}
	res := r.result
	switch {
	case res.outcome == "":
		// Left, or lost, to another owner, which settles it: once lost,
		// its record, written within the wait, is this client's answer
		// too.
		if !res.lost {
			h.refuse(w, q, failSettling, nil)
			return
		}
		if rec := h.awaitOtherOwner(q); rec != nil {
			h.replayRecord(w, q, rec)
			q.status, q.outcome = rec.Status, OutcomeReplayed
			return
		}
		h.refuse(w, q, failSettling, nil)
		return
	case res.rec == nil:
		h.refuse(w, q, failSettledAbsent, nil)
	default:
		h.replayRecord(w, q, res.rec)
		q.status = res.rec.Status
	}
	q.outcome = res.outcome
}

// awaitOtherOwner waits, up to upstream.timeout from when q took the key
// (awaitSettlement), for the record that the key's other owner writes once
// it has settled it, and returns it; nil when none came in time.
func (h *Handler) awaitOtherOwner(q *request) *store.Record {
	if h.inspector == nil {
		return nil
	}
	deadline := q.began.Add(h.upstreamTimeout)
	for {
		e, err := h.inspector.Inspect(q.in.Context(), q.keyHash)
		if err == nil && e.State == store.Completed && e.Record != nil && e.Record.Fingerprint == q.fp {
			return e.Record
		}
		left := deadline.Sub(h.clock.Now())
		if left <= 0 {
			return nil
		}
		select {
		case <-h.clock.After(min(left, 50*time.Millisecond)):
		case <-q.in.Context().Done():
			return nil
		}
	}
}
