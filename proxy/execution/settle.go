package execution

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Settling a key: once its upstream call returned, an executed request
// records the answer as its key's record, or releases the key when there
// is none to keep. A store briefly unavailable is tried again in the
// background (the client already has its answer) until the lease would
// have expired, after which the store settles the key on its own. A key
// the store has no room for is held, its lease renewed: a full store must
// never let a retry execute the key again (docs/guarantees.md).

// A Recorder is what settling a key asks of the store: the operations of
// store.Store on a key and the lease's token.
type Recorder interface {
	// CompleteFrom is Complete timed from start, a reading of the clock
	// the caller took when the call returned.
	CompleteFrom(ctx context.Context, start time.Time, key, token string, rec *store.Record, ttl time.Duration) error
	Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error
	Release(ctx context.Context, key, token string) error
	Extend(ctx context.Context, key, token string, ttl time.Duration) error
}

// A Settler settles the keys of one handler: its store, its clock, its
// log and the counters settling moves.
type Settler struct {
	Store Recorder
	Clock *Clock // the handler's, which tests replace
	Log   *slog.Logger
	// LockLost counts leases found lost; BodyOmitted records stored
	// without their body, by reason (OmittedStoreFull...).
	LockLost    prometheus.Counter
	BodyOmitted map[string]prometheus.Counter
}

// OmittedStoreFull is why a record is stored without its body when the
// store has no room for it whole: a value of the "reason" label of
// idempotency_proxy_records_body_omitted_total.
const OmittedStoreFull = "store_full"

// Lost-lease messages, by when the loss is found: a renewal finds it while
// the upstream still runs, before any response exists; a completion after
// the response went to the client.
const (
	LostWhileRunning   = "lease on key lost while its upstream request runs: it expired, or an operator deleted it, and another request may execute it; this request's response will be delivered but not recorded"
	LostAfterDelivered = "lease on key lost: it expired, or an operator deleted it, while the upstream ran, and another request may have executed it; this response was delivered but not recorded"
)

// Lost reports a lease on key, of route's lock_ttl, found lost during an
// operation: counted in idempotency_proxy_lock_lost_total and logged with
// msg (LostWhileRunning, LostAfterDelivered).
func (e *Settler) Lost(route, key string, lockTTL time.Duration, during, msg string) {
	e.LockLost.Inc()
	e.Log.Warn(msg, "route", route, "key_hash", key, "during", during, "lock_ttl", lockTTL.String())
}

// A Settling is the settling of one key, from its call's return until the
// store took its record or its release, or its lease ran out. Its caller
// sets the key, the record and its lease; the rest says how settling went.
type Settling struct {
	Key, Token string // the storage key and the lease's owner token
	Route      string // the route's label, for the log
	LockTTL    time.Duration
	Lease      *Lease

	// Rec is the record to store, nil to release the key; TTL is how long
	// the store keeps it. OmitReason says why it has no body ("" when it
	// has), for idempotency_proxy_records_body_omitted_total.
	Rec        *store.Record
	TTL        time.Duration
	OmitReason string
	// From is when the first try is timed from (when the call returned:
	// little but the record's assembly lies between); zero, or after the
	// first try, each try reads the clock.
	From time.Time

	// Held is set once the store had no room even for Rec without its
	// body: the key stays locked, its lease renewed, until Rec fits.
	Held bool
	// Unreplicated is set once a try wrote Rec on the store's master but
	// fewer replicas than replica_ack acknowledged it: retries replay it,
	// unless a failover loses it first.
	Unreplicated bool
	// Refused is set once the store refused Rec (store.ErrRefused), which
	// ends the renewals; RecordLost once it refused it because the lease
	// was lost: the key's record, if any, is another owner's.
	Refused    bool
	RecordLost bool

	// renewUntil is as far as settling renews the lease of Rec
	// (renewToRecord); warnedRetry is set once a failed try was logged.
	renewUntil  time.Time
	warnedRetry bool
}

// Try records s.Rec, or releases the key when there is none, once, and
// reports whether the key is settled: recorded, released, or lost to
// another owner. leaseLost says the lease was found lost already, and
// reported.
func (s *Settling) Try(ctx context.Context, e *Settler, leaseLost bool) (settled bool) {
	if s.Rec == nil {
		return s.TryRelease(ctx, e)
	}
	return s.tryComplete(ctx, e, leaseLost)
}

// Later keeps trying to settle the key, for as long as its lease lives:
// the last try goes out just before it expires (lastTryBefore), because a
// store back in the lease's last second still takes the record, and a
// record the store does not take lets a retry execute the key again. A
// record's lease is renewed in its last third on the way (renewToRecord),
// so a store that answers again has the time to take the record — for one
// lock_ttl more at most (renewUntil).
//
// It reports whether the key was settled; false when the lease ran out
// first, or was lost while held.
func (s *Settling) Later(ctx context.Context, e *Settler, leaseLost bool) (settled bool) {
	clock := *e.Clock
	ttl := s.LockTTL
	s.renewUntil = s.Lease.End().Add(ttl)
	backoff := 50 * time.Millisecond
	for {
		wait := backoff
		if s.Held {
			wait = min(wait, RenewEvery(ttl))
		}
		left := s.Lease.End().Sub(clock.Now()) - lastTryBefore(ttl)
		if left <= 0 {
			e.Log.Warn(s.gaveUp(), "route", s.Route, "key_hash", s.Key)
			return false
		}
		<-clock.After(min(wait, left))
		if wait >= left && s.Rec != nil && !s.Held {
			// The try due just before the lease ends goes first: a
			// renewal sent to a store that does not answer would hold it
			// until the store's timeout, past the lease's end.
			if s.Try(ctx, e, leaseLost) {
				return true
			}
			s.renewToRecord(ctx, e)
			continue
		}
		switch {
		case s.Held:
			if s.renewHeld(ctx, e) {
				return false // lost: another owner has the key
			}
		case s.Rec != nil:
			s.renewToRecord(ctx, e)
		}
		if s.Try(ctx, e, leaseLost) {
			return true
		}
		backoff = min(2*backoff, time.Second)
	}
}

// gaveUp says how settling the key ended when its lease ran out first.
func (s *Settling) gaveUp() string {
	switch {
	case s.Rec == nil:
		return "could not release key before its lease expired; it unlocks at lock_ttl"
	case s.Unreplicated:
		// Not a lost record: it is there, with its ttl, while the master is.
		return "response recorded on the store's master, but fewer replicas than replica_ack acknowledged it before its lease expired; " +
			"retries replay it, unless the master fails before a replica has it: after such a failover a retry with its key executes again"
	}
	return "could not record response before its lease expired; a retry with its key will execute again"
}

// lastTryBefore is how long before a lease of ttl expires, as far as this
// process knows, settling tries for the last time: little enough that a
// store back in the lease's last moments still gets the try, enough that
// the try reaches it before the lease ends there. The lease's end is read
// from when Begin was sent, so the store's own end is later still.
func lastTryBefore(ttl time.Duration) time.Duration { return min(ttl/10, 100*time.Millisecond) }

// renewToRecord renews the lease of a key whose record is still to be
// written once the lease is in its last third, as a running lease is
// renewed: a store that answers again, but not yet the record, must not
// see the lease run out meanwhile. A failed renewal changes nothing: the
// try to record that follows says why, or finds the lease lost, or its
// own record written by a try whose reply was lost.
//
// Renewals stop at renewUntil, one lock_ttl past the lease's end when the
// call returned, and after the store refused the record
// (store.ErrRefused): a store that takes renewals but never the record (a
// trigger or privilege refusing it, a body whose write always times out)
// would otherwise keep its key answering 409, and its record in memory,
// for ever. One lock_ttl is the longest the operator lets a key stay
// locked for an owner that no longer answers; a store back within it
// still gets the record.
func (s *Settling) renewToRecord(ctx context.Context, e *Settler) {
	clock := *e.Clock
	ttl := s.LockTTL
	if s.Refused || s.Lease.End().Sub(clock.Now()) > RenewEvery(ttl) {
		return
	}
	sent := clock.Now()
	d := min(ttl, s.renewUntil.Sub(sent))
	if !sent.Add(d).After(s.Lease.End()) {
		return // at renewUntil already
	}
	if e.Store.Extend(ctx, s.Key, s.Token, d) == nil {
		s.Lease.ExtendTo(sent.Add(d))
	}
}

// renewHeld extends the lease of a key held for lack of space and reports
// whether the lease was lost.
func (s *Settling) renewHeld(ctx context.Context, e *Settler) (lost bool) {
	sent := (*e.Clock).Now()
	err := e.Store.Extend(ctx, s.Key, s.Token, s.LockTTL)
	switch {
	case err == nil:
		s.Lease.ExtendTo(sent.Add(s.LockTTL))
	case errors.Is(err, store.ErrLockLost):
		e.Lost(s.Route, s.Key, s.LockTTL, "renewal while the store was full", LostAfterDelivered)
		return true
	default:
		e.Log.Warn("could not renew lease of a key held while the store is full", "route", s.Route, "key_hash", s.Key, "error", err)
	}
	return false
}

// tryComplete stores s.Rec. When the store has no room for it, it stores
// the record without its body instead; when there is no room for that
// either, it holds the key (s.Held) so that no retry executes again, and
// the caller keeps trying.
func (s *Settling) tryComplete(ctx context.Context, e *Settler, leaseLost bool) (settled bool) {
	start := s.From
	if start.IsZero() {
		start = (*e.Clock).Now()
	}
	s.From = time.Time{}
	err := e.Store.CompleteFrom(ctx, start, s.Key, s.Token, s.Rec, s.TTL)
	if errors.Is(err, store.ErrFull) && len(s.Rec.Body) > 0 {
		s.Rec, s.OmitReason = withoutBody(s.Rec), OmittedStoreFull
		err = e.Store.Complete(ctx, s.Key, s.Token, s.Rec, s.TTL)
	}
	switch {
	case err == nil:
		if s.OmitReason != "" {
			e.BodyOmitted[s.OmitReason].Inc()
		}
		if s.Held {
			e.Log.Info("store had room again: response recorded", "route", s.Route, "key_hash", s.Key)
		}
		return true
	case errors.Is(err, store.ErrLockLost):
		if !leaseLost {
			e.Lost(s.Route, s.Key, s.LockTTL, "complete", LostAfterDelivered)
		}
		s.RecordLost = true
		return true
	case errors.Is(err, store.ErrFull):
		if !s.Held {
			s.Held = true
			e.Log.Error("store full: no room to record a response, even without its body; the key stays locked (retries get 409) until the record fits",
				"route", s.Route, "key_hash", s.Key, "error", err)
		}
		return false
	}
	if errors.Is(err, store.ErrUnreplicated) {
		s.Unreplicated = true
		e.Log.Warn("response recorded on the store's master, not yet acknowledged by replica_ack replicas; writing it again until they do or its lease expires",
			"route", s.Route, "key_hash", s.Key, "error", err)
		return false
	}
	if errors.Is(err, store.ErrRefused) {
		s.Refused = true
	}
	s.warnRetry(e, "could not record response yet; retrying until its lease expires", err)
	return false
}

// withoutBody is rec with its body left out, for a store with no room for it.
func withoutBody(rec *store.Record) *store.Record {
	out := *rec
	out.Body, out.BodyOmitted = nil, true
	out.Header = make(map[string][]string, len(rec.Header))
	for k, v := range rec.Header {
		out.Header[k] = v
	}
	if _, ok := out.Header["Content-Length"]; ok {
		out.Header["Content-Length"] = contentLengthZero
	}
	return &out
}

// contentLengthZero is the Content-Length of a record without its body.
var contentLengthZero = []string{"0"}

// TryRelease releases the key, once, and reports whether it did.
func (s *Settling) TryRelease(ctx context.Context, e *Settler) (released bool) {
	err := e.Store.Release(ctx, s.Key, s.Token)
	if err == nil {
		return true
	}
	s.warnRetry(e, "could not release key yet; retrying until its lease expires", err)
	return false
}

// warnRetry logs a failed try at settling the key, the first time only: a
// store that keeps failing is said once, then by how settling ended
// (gaveUp), not once a second for the whole lease.
func (s *Settling) warnRetry(e *Settler, msg string, err error) {
	if s.warnedRetry {
		return
	}
	s.warnedRetry = true
	e.Log.Warn(msg, "route", s.Route, "key_hash", s.Key, "error", err)
}

// The lease of a key whose outcome is unknown: while the upstream is asked
// what became of the call, the key stays held by this process, its lease
// renewed as a running call's is, so that no retry forwards it meanwhile.

// HoldFor waits d while renewing the lease every RenewEvery of lock_ttl,
// and reports whether it was lost.
func (s *Settling) HoldFor(ctx context.Context, e *Settler, d time.Duration) (lost bool) {
	every := RenewEvery(s.LockTTL)
	for {
		step := min(d, every)
		<-(*e.Clock).After(step)
		d -= step
		if _, lost := s.RenewUnknown(ctx, e); lost {
			return true
		}
		if d <= 0 {
			return false
		}
	}
}

// KeepHeld renews the lease every RenewEvery of lock_ttl while an upstream
// call of the settlement runs (a lookup, a resend: up to
// upstream.max_execution, longer than lock_ttl may be), until the returned
// stop is called.
func (s *Settling) KeepHeld(ctx context.Context, e *Settler) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-(*e.Clock).After(RenewEvery(s.LockTTL)):
			}
			if _, lost := s.RenewUnknown(ctx, e); lost {
				return
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// RenewUnknown extends the lease of a key whose outcome is being settled.
// held reports that the store renewed it: only then may the key be sent
// upstream again. lost reports that it is no longer this process's: the
// store says so, or the store could not be reached until the lease's end
// passed, after which another proxy may have taken the key. A store
// briefly unavailable is tried again at the next step: the lease outlives
// a few.
func (s *Settling) RenewUnknown(ctx context.Context, e *Settler) (held, lost bool) {
	clock := *e.Clock
	sent := clock.Now()
	err := e.Store.Extend(ctx, s.Key, s.Token, s.LockTTL)
	switch {
	case err == nil:
		s.Lease.ExtendTo(sent.Add(s.LockTTL))
		return true, false
	case errors.Is(err, store.ErrLockLost):
		e.Lost(s.Route, s.Key, s.LockTTL, "renewal while settling an unknown outcome", LostWhileRunning)
		return false, true
	case !clock.Now().Before(s.Lease.End()):
		e.Log.Warn("could not renew the lease of a key being settled before it ended: another proxy may hold the key, and settles it",
			"route", s.Route, "key_hash", s.Key, "error", err)
		return false, true
	}
	e.Log.Warn("could not renew the lease of a key being settled", "route", s.Route, "key_hash", s.Key, "error", err)
	return false, false
}
