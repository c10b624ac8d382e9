package proxy

import (
	"cmp"
	"encoding/hex"
	"github.com/idempotency-proxy/idempotency-proxy/internal/adoption"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The adoption report (GET /admin/report, `idempotency-proxy report`):
// what each route did, or in shadow mode would have done, over a recent
// window. It is this process's view since it started, counted in memory;
// a fleet sums idempotency_proxy_requests_total, _shadow_total and
// _key_churn_total in Prometheus instead (docs/operating.md).

// ReportBucket is the span one bucket of counts covers, and ReportKept
// how far back the report can see: one bucket a minute for 24 hours.
const (
	ReportBucket = adoption.Bucket
	ReportKept   = 24 * time.Hour
	reportSlots  = int(ReportKept / ReportBucket)
)

// reportTopScopes is how many churning scopes a report names, and
// reportTrackedScopes how many a route keeps counts for.
const (
	reportTopScopes     = 10
	reportTrackedScopes = 1000
)

// reportField is one count a bucket keeps.
type reportField int

const (
	fieldRequests    reportField = iota // every request the route answered
	fieldKeyed                          // of them, with an idempotency key
	fieldReplayed                       // answered from a record (enforce)
	fieldWouldReplay                    // forwarded, enforce would have replayed (shadow)
	fieldMismatch                       // 422, or would have been
	fieldConflict                       // 409, or would have been
	fieldMissingKey                     // without a key on a method the route protects
	fieldChurn                          // key churn
	reportFields
)

// reportBucketBytes is the memory one bucket takes, and so a route's
// counts take reportSlots of them: 72 bytes × 1,440 ≈ 101 KiB a route.
const reportBucketBytes = 8 + 8*int(reportFields)

// reportBucket holds one minute's counts; minute says which.
type reportBucket struct {
	minute atomic.Int64 // Unix minutes
	n      [reportFields]atomic.Uint64
}

// reportCounts are one route's counts, kept across reloads by its label
// (Metrics.route) while the route is configured: a reload that removes the
// route drops them (keepReportsOf). add is atomic adds only: it runs on
// every request.
type reportCounts struct {
	started int64 // Unix minute the counts begin
	roll    sync.Mutex
	slots   [reportSlots]reportBucket

	scopesMu sync.Mutex
	scopes   map[[16]byte]uint64 // churn by scope hash, at most reportTrackedScopes
}

func newReportCounts(now time.Time) *reportCounts {
	return &reportCounts{started: unixMinute(now), scopes: map[[16]byte]uint64{}}
}

func unixMinute(t time.Time) int64 { return t.Unix() / int64(ReportBucket/time.Second) }

// add counts one of f at t.
func (c *reportCounts) add(t time.Time, f reportField) {
	c.bucket(t).n[f].Add(1)
}

// bucket is the bucket of t's minute.
func (c *reportCounts) bucket(t time.Time) *reportBucket {
	m := unixMinute(t)
	b := &c.slots[m%int64(reportSlots)]
	if b.minute.Load() != m {
		c.reuse(b, m)
	}
	return b
}

// reuse empties b, which held a minute a day old, for minute m. An add
// racing with it may be lost; the report is a sample of the traffic, not
// a ledger.
func (c *reportCounts) reuse(b *reportBucket, m int64) {
	c.roll.Lock()
	defer c.roll.Unlock()
	if b.minute.Load() >= m {
		return
	}
	for i := range b.n {
		b.n[i].Store(0)
	}
	b.minute.Store(m)
}

// outcome counts a request that ended in o, keyed or not.
// Its counts go to one bucket, found once.
func (c *reportCounts) outcome(t time.Time, o Outcome, keyed bool) {
	b := c.bucket(t)
	b.n[fieldRequests].Add(1)
	if keyed {
		b.n[fieldKeyed].Add(1)
	}
	switch o {
	case OutcomeReplayed:
		b.n[fieldReplayed].Add(1)
	case OutcomeMismatch:
		b.n[fieldMismatch].Add(1)
	case OutcomeConflict:
		b.n[fieldConflict].Add(1)
	case OutcomeMissingKey, OutcomeNoKey:
		b.n[fieldMissingKey].Add(1)
	}
}

// would counts what a shadow route would have answered instead.
func (c *reportCounts) would(t time.Time, w Would) {
	switch w {
	case WouldReplay:
		c.add(t, fieldWouldReplay)
	case WouldMismatch:
		c.add(t, fieldMismatch)
	case WouldConflict:
		c.add(t, fieldConflict)
	case WouldMissingKey:
		c.add(t, fieldMissingKey)
	}
}

// churned counts a churned request under its scope's hash. Churn is rare
// next to requests, so a lock is fine here. When reportTrackedScopes are
// held, the least counted gives way and the newcomer starts from its count
// (space-saving): a scope churning often cannot be kept out.
func (c *reportCounts) churned(t time.Time, scope [16]byte) {
	c.add(t, fieldChurn)
	c.scopesMu.Lock()
	defer c.scopesMu.Unlock()
	if _, ok := c.scopes[scope]; !ok && len(c.scopes) >= reportTrackedScopes {
		var least [16]byte
		var n uint64
		first := true
		for s, k := range c.scopes {
			if first || k < n {
				least, n, first = s, k, false
			}
		}
		delete(c.scopes, least)
		c.scopes[scope] = n
	}
	c.scopes[scope]++
}

// reportScope is what every report says of itself.
const reportScope = "this proxy process only, since it started; for a fleet, query Prometheus (docs/operating.md)"

// sum adds the buckets of the minutes from..to, both included, into out.
func (c *reportCounts) sum(from, to int64) (out [reportFields]uint64) {
	for m := from; m <= to; m++ {
		b := &c.slots[m%int64(reportSlots)]
		if b.minute.Load() != m {
			continue
		}
		for i := range out {
			out[i] += b.n[i].Load()
		}
	}
	return out
}

// line is the route's report over the minutes from..to.
func (c *reportCounts) line(route, mode string, from, to int64) adoption.Route {
	n := c.sum(from, to)
	r := adoption.Route{
		Route: route, Mode: mode,
		Requests: n[fieldRequests], Keyed: n[fieldKeyed],
		Duplicates:      n[fieldReplayed] + n[fieldWouldReplay],
		ExecutionsSaved: n[fieldReplayed], ExecutionsWouldBe: n[fieldWouldReplay],
		Mismatches: n[fieldMismatch], Conflicts: n[fieldConflict],
		MissingKeys: n[fieldMissingKey], Churn: n[fieldChurn],
		TopChurnScopes: c.topScopes(),
	}
	if protected := r.Keyed + r.MissingKeys; protected > 0 {
		r.KeyedShare = float64(r.Keyed) / float64(protected)
	}
	return r
}

// topScopes are the reportTopScopes scopes with the most churn.
func (c *reportCounts) topScopes() []adoption.ChurnScope {
	c.scopesMu.Lock()
	out := make([]adoption.ChurnScope, 0, len(c.scopes))
	for s, n := range c.scopes {
		out = append(out, adoption.ChurnScope{ScopeHash: hex.EncodeToString(s[:]), Churn: n})
	}
	c.scopesMu.Unlock()
	slices.SortFunc(out, func(a, b adoption.ChurnScope) int {
		if c := cmp.Compare(b.Churn, a.Churn); c != 0 {
			return c
		}
		return cmp.Compare(a.ScopeHash, b.ScopeHash)
	})
	return out[:min(len(out), reportTopScopes)]
}

// Report is the adoption report over the last window, for every enabled
// route of the live configuration; a window longer than what is kept is
// answered with what is kept, and Note says so.
func (h *Handler) Report(window time.Duration) adoption.Report {
	return h.reportAt(time.Now(), window)
}

func (h *Handler) reportAt(now time.Time, window time.Duration) adoption.Report {
	to := unixMinute(now)
	// The minutes asked, rounded up without adding to window: the longest
	// duration there is must not wrap round to a minute.
	asked := max(1, int64((window-1)/ReportBucket)+1)
	kept := min(int64(reportSlots), to-unixMinute(h.metrics.reportsStart)+1)
	covered := min(asked, kept)
	from := to - covered + 1
	out := adoption.Report{
		Window:  window.String(),
		Covered: (time.Duration(covered) * ReportBucket).String(),
		Since:   time.Unix(from*int64(ReportBucket/time.Second), 0).UTC(),
		Scope:   reportScope,
		Routes:  []adoption.Route{},
	}
	switch {
	case covered == asked:
	case kept == int64(reportSlots):
		out.Note = "the window is longer than the " + ReportKept.String() + " this proxy keeps: the report covers what is kept"
	default:
		out.Note = "this proxy started less than the window ago: the report covers the time since it started"
	}
	for _, rt := range h.routes.Load().all() {
		if !rt.disabled {
			out.Routes = append(out.Routes, rt.metrics.report.line(rt.label, rt.policy.Mode.String(), from, to))
		}
	}
	slices.SortFunc(out.Routes, func(a, b adoption.Route) int { return cmp.Compare(a.Route, b.Route) })
	return out
}

// keepReportsOf drops the report counts of every route but t's, once t is
// in force: a reload that removes a route drops its counts, which no report
// shows, so that routes renamed reload after reload do not each keep
// theirs. A request still served by the old table counts into counts no
// longer held.
func (m *Metrics) keepReportsOf(t *routeTable) {
	routes := t.all()
	m.reportsMu.Lock()
	defer m.reportsMu.Unlock()
	for label := range m.reports {
		if !slices.ContainsFunc(routes, func(rt *route) bool { return rt.label == label }) {
			delete(m.reports, label)
		}
	}
}
