package proxy

import (
	"net/http"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Outcome is the value of the "outcome" label: what the proxy did with a request.
type Outcome string

// Outcomes, as documented in docs/operating.md.
const (
	OutcomePassthrough   Outcome = "passthrough"                // method or route not protected
	OutcomeNoKey         Outcome = "no_key"                     // forwarded without a key
	OutcomeMissingKey    Outcome = "missing_key"                // 400, key required
	OutcomeInvalidKey    Outcome = "invalid_key"                // 400, malformed key
	OutcomeTooLarge      Outcome = "too_large"                  // 413, request body over the limit
	OutcomeExecuted      Outcome = "executed"                   // forwarded once and recorded
	OutcomeReplayed      Outcome = "replayed"                   // recorded response replayed
	OutcomeConflict      Outcome = "conflict"                   // 409, key in flight
	OutcomeMismatch      Outcome = "mismatch"                   // 422, key reused with another payload
	OutcomeStoreRejected Outcome = "store_unavailable_rejected" // 503, fail_closed
	OutcomeStoreBypassed Outcome = "store_unavailable_bypassed" // forwarded unprotected, fail_open
	OutcomeUpstreamError Outcome = "upstream_error"             // 502 from the proxy
	OutcomeReleased      Outcome = "released"                   // delivered, key released (release_statuses, upstream no-store)
	// OutcomeBadRequest: a request body that could not be read (client
	// gone or too slow) fits none of the other outcomes.
	OutcomeBadRequest Outcome = "bad_request"
	// OutcomeUnreadable: 503 record-unreadable, a record is stored under
	// the key that cannot be read (its encryption key is gone, its bytes
	// were changed, or its format is newer); never executed again.
	OutcomeUnreadable Outcome = "unreadable"
	// OutcomeAmbiguous: 400 ambiguous-body, -path or -method, a request
	// the upstream may read another way than the proxy, refused before
	// anything is locked (docs/request-handling.md).
	OutcomeAmbiguous Outcome = "ambiguous"
	// OutcomeUpstreamTimeout: 504, the upstream did not answer within
	// upstream.timeout; the call goes on detached.
	OutcomeUpstreamTimeout Outcome = "upstream_timeout"
	// OutcomeExpiredKey: 410 key-expired, the key's record expired within
	// expired_key_window under expired_keys: reject; not forwarded.
	OutcomeExpiredKey Outcome = "expired_key"
	// OutcomeAcceptedAsync: 202 with a status URL under Prefer:
	// respond-async, for the request whose call it started and for its
	// retries while the call runs; timed as the proxy's own answer.
	OutcomeAcceptedAsync Outcome = "accepted_async"
)

// Outcomes returns every outcome, a copy the caller may keep.
func Outcomes() []Outcome { return slices.Clone(allOutcomes) }

// allOutcomes lists every outcome, so that each route's series exist from the start.
var allOutcomes = []Outcome{
	OutcomePassthrough, OutcomeNoKey, OutcomeMissingKey, OutcomeInvalidKey, OutcomeTooLarge,
	OutcomeExecuted, OutcomeReplayed, OutcomeConflict, OutcomeMismatch, OutcomeStoreRejected,
	OutcomeStoreBypassed, OutcomeUpstreamError, OutcomeReleased, OutcomeBadRequest, OutcomeUnreadable,
	OutcomeAmbiguous, OutcomeUpstreamTimeout, OutcomeExpiredKey,
	OutcomeReconciledFound, OutcomeReconciledAbsent, OutcomeReconcileGaveUp, OutcomeAcceptedAsync,
}

// Result is the value of the "result" label of the request duration
// histogram: the outcome, coarsened to where the time went. A histogram
// by outcome would be 18 outcomes × 21 series a route, nearly all of them
// zero; by result it is 4 × 21, and the counter by outcome keeps the
// detail.
type Result string

// Results, as documented in docs/operating.md.
const (
	ResultReplayed  Result = "replayed"  // answered from the store
	ResultExecuted  Result = "executed"  // forwarded under a lease, whatever came of it
	ResultForwarded Result = "forwarded" // forwarded unprotected
	ResultRefused   Result = "refused"   // answered by the proxy without the upstream
)

// allResults lists every result, so that each route's series exist from the start.
var allResults = []Result{ResultReplayed, ResultExecuted, ResultForwarded, ResultRefused}

// ResultOf is the result an outcome is timed under.
func ResultOf(o Outcome) Result {
	switch o {
	case OutcomeReplayed:
		return ResultReplayed
	case OutcomeExecuted, OutcomeReleased, OutcomeUpstreamError, OutcomeUpstreamTimeout,
		OutcomeReconciledFound, OutcomeReconciledAbsent, OutcomeReconcileGaveUp:
		return ResultExecuted
	case OutcomePassthrough, OutcomeNoKey, OutcomeStoreBypassed:
		return ResultForwarded
	}
	return ResultRefused
}

// Protocol is what a request came as, for metrics and the access line: a
// small enumeration, never a value from the request.
type Protocol uint8

const (
	ProtocolHTTP1 Protocol = iota // HTTP/1.x
	ProtocolHTTP2                 // HTTP/2 (h2c), not gRPC
	ProtocolGRPC                  // gRPC, over HTTP/2
	numProtocols
)

var protocolNames = [numProtocols]string{"http1", "http2", "grpc"}

func (p Protocol) String() string { return protocolNames[p] }

// protocolOf is the protocol r came as.
func protocolOf(r *http.Request) Protocol {
	switch {
	case r.ProtoMajor != 2:
		return ProtocolHTTP1
	case isGRPC(r):
		return ProtocolGRPC
	}
	return ProtocolHTTP2
}

// storeOp is a store operation; its String is the "operation" label's
// value.
type storeOp int

// Store operations.
const (
	opBegin storeOp = iota
	opExtend
	opComplete
	opRelease
	opPing
	numStoreOps
)

var storeOpNames = [numStoreOps]string{"begin", "extend", "complete", "release", "ping"}

func (op storeOp) String() string { return storeOpNames[op] }

// Reasons a record is stored without its body, the values of the "reason"
// label of idempotency_proxy_records_body_omitted_total.
const (
	omitTooLarge  = "too_large"
	omitStoreFull = execution.OmittedStoreFull
)

// defaultRoute is the route label of requests that match no configured route.
const defaultRoute = "default"

// Buckets for a loopback sidecar: from 100µs (a replay from memory) to 60s
// (the default upstream timeout).
var durationBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
}

// Metrics holds the proxy's Prometheus collectors.
type Metrics struct {
	requests         *prometheus.CounterVec
	requestDuration  *prometheus.HistogramVec
	upstreamDuration *prometheus.HistogramVec
	storeDuration    *prometheus.HistogramVec
	storeErrors      *prometheus.CounterVec
	inflight         prometheus.Gauge
	lockLost         prometheus.Counter
	bodyOmitted      map[string]prometheus.Counter // by reason
	unreadable       map[string]prometheus.Counter // by reason
	// Upstream calls that went on after their client was let go
	// (detach.go): running now, ended by route and outcome, and refused
	// for want of room.
	detached      prometheus.Gauge
	detachedEnded *prometheus.CounterVec
	detachRefused prometheus.Counter
	// Lookups of unknown outcomes (reconcile.go), by route and result.
	probes   *prometheus.CounterVec
	shadow   *prometheus.CounterVec
	keyChurn *prometheus.CounterVec
	// protocols counts requests by route and protocol (http1, http2, grpc).
	protocols *prometheus.CounterVec

	// Children resolved once: a label lookup per request costs more than
	// the replay it measures.
	ops [numStoreOps]opMetrics

	// reports are each route's counts for the adoption report, by label,
	// kept across reloads like the Prometheus series; reportsStart is when
	// the first began.
	reportsMu    sync.Mutex
	reports      map[string]*reportCounts
	reportsStart time.Time
}

type opMetrics struct {
	duration prometheus.Observer
	errors   prometheus.Counter
}

// routeMetrics are one route's series, resolved when its table is built.
type routeMetrics struct {
	// outcomes holds each outcome's request counter and duration
	// histogram together: one lookup a request rather than two.
	outcomes map[Outcome]outcomeMetrics
	upstream prometheus.Observer
	// detached counts the ends of detached calls, by the outcomes an
	// executed request can have.
	detached map[Outcome]prometheus.Counter
	// probes counts the route's lookups of unknown outcomes, by result.
	probes map[string]prometheus.Counter
	// shadow counts what enforce would have answered a request a shadow
	// route forwarded; nil under enforce.
	shadow map[Would]prometheus.Counter
	churn  prometheus.Counter // idempotency_proxy_key_churn_total
	report *reportCounts      // the adoption report's counts (report.go)
	// protocols counts the route's requests by Protocol.
	protocols [numProtocols]prometheus.Counter
}

// executedOutcomes are the outcomes an executed request ends in:
// passthrough for a gRPC call whose answer showed a server stream
// (grpcReleased).
var executedOutcomes = []Outcome{OutcomeExecuted, OutcomeReleased, OutcomeUpstreamError, OutcomePassthrough}

// NewMetrics creates the proxy's collectors and registers them, plus
// idempotency_proxy_build_info, on reg.
func NewMetrics(reg prometheus.Registerer, version string) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idempotency_proxy_requests_total",
			Help: "Requests handled, by route and outcome.",
		}, []string{"route", "outcome"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idempotency_proxy_request_duration_seconds",
			Help:    "Time from receiving a request to finishing its response, by route and result (replayed, executed, forwarded unprotected, refused by the proxy); idempotency_proxy_requests_total has the outcome.",
			Buckets: durationBuckets,
		}, []string{"route", "result"}),
		upstreamDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idempotency_proxy_upstream_duration_seconds",
			Help:    "Duration of upstream exchanges, by route.",
			Buckets: durationBuckets,
		}, []string{"route"}),
		storeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idempotency_proxy_store_operation_duration_seconds",
			Help:    "Duration of store operations, by operation.",
			Buckets: durationBuckets,
		}, []string{"operation"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idempotency_proxy_store_errors_total",
			Help: "Store operations that failed because the store was unavailable or full, by operation.",
		}, []string{"operation"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idempotency_proxy_inflight_requests",
			Help: "Requests currently being handled by the proxy listener.",
		}),
		lockLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idempotency_proxy_lock_lost_total",
			Help: "Completions or lease renewals refused because the lease had expired and another owner may have run the request.",
		}),
		detached: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idempotency_proxy_detached_requests",
			Help: "Upstream calls running after their client was let go (upstream.timeout passed, or the client disconnected); each ends by upstream.max_execution.",
		}),
		detachedEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idempotency_proxy_detached_requests_total",
			Help: "Upstream calls that ended after their client was let go, by route and outcome (executed: recorded; released; upstream_error: failed or cut at upstream.max_execution).",
		}, []string{"route", "outcome"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idempotency_proxy_reconcile_probes_total",
			Help: "Lookups sent to the upstream to settle unknown outcomes (on_upstream_error: reconcile), by route and result: found, absent, unknown (another status), error (no answer within its deadline, or a failed connection).",
		}, []string{"route", "result"}),
		detachRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idempotency_proxy_detach_refused_total",
			Help: "Upstream calls that could not go on after their client was let go because upstream.max_detached or upstream.max_detached_bytes was reached; they were bounded by upstream.timeout instead.",
		}),
		shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idempotency_proxy_shadow_total",
			Help: "Requests a route in shadow mode forwarded that enforce would have answered otherwise, by route and what it would have done (replay, conflict, mismatch, missing_key, invalid_key, too_large, ambiguous, expired_key, unreadable, store_unavailable).",
		}, []string{"route", "would"}),
		keyChurn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idempotency_proxy_key_churn_total",
			Help: "Keyed requests whose fingerprint and scope were sent under another key within churn_window, by route: clients minting a new key per attempt.",
		}, []string{"route"}),
		protocols: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idempotency_proxy_requests_by_protocol_total",
			Help: "Requests handled, by route and protocol: http1, http2 (h2c), grpc (over HTTP/2). A gRPC method is named by its route (match: POST /package.Service/Method).",
		}, []string{"route", "protocol"}),
	}
	omitted := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idempotency_proxy_records_body_omitted_total",
		Help: "Responses recorded without their body, by reason: too_large (over max_response_body) or store_full (no room in the store for the body).",
	}, []string{"reason"})
	m.bodyOmitted = map[string]prometheus.Counter{}
	for _, reason := range []string{omitTooLarge, omitStoreFull} {
		m.bodyOmitted[reason] = omitted.WithLabelValues(reason)
	}
	unreadable := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idempotency_proxy_record_unreadable_total",
		Help: "Requests refused with 503 record-unreadable because the key's record could not be read, by reason: key_unknown (sealed with a key no longer in the keyring), auth_failed (changed, or copied from another key), format (not a record this version can decode).",
	}, []string{"reason"})
	m.unreadable = map[string]prometheus.Counter{}
	for _, reason := range store.UnreadableReasons {
		m.unreadable[reason] = unreadable.WithLabelValues(reason)
	}
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "idempotency_proxy_build_info",
		Help: "Always 1; labels carry the version and the Go version the binary was built with.",
	}, []string{"version", "goversion"})
	buildInfo.WithLabelValues(version, runtime.Version()).Set(1)

	reg.MustRegister(m.requests, m.requestDuration, m.upstreamDuration, m.storeDuration,
		m.storeErrors, m.inflight, m.lockLost, omitted, unreadable, buildInfo,
		m.detached, m.detachedEnded, m.detachRefused, m.probes, m.shadow, m.keyChurn, m.protocols)
	for op, name := range storeOpNames {
		m.ops[op] = opMetrics{m.storeDuration.WithLabelValues(name), m.storeErrors.WithLabelValues(name)}
	}
	m.reports, m.reportsStart = map[string]*reportCounts{}, time.Now()
	m.route(defaultRoute)
	return m
}

// reportCounts returns the label's report counts, created on first use.
func (m *Metrics) reportCounts(label string) *reportCounts {
	m.reportsMu.Lock()
	defer m.reportsMu.Unlock()
	c := m.reports[label]
	if c == nil {
		c = newReportCounts(time.Now())
		m.reports[label] = c
	}
	return c
}

// route creates a route's series at zero, so rates and alerts work before
// the first request of each outcome, and returns them.
func (m *Metrics) route(label string) *routeMetrics {
	rm := &routeMetrics{
		outcomes: make(map[Outcome]outcomeMetrics, len(allOutcomes)),
		upstream: m.upstreamDuration.WithLabelValues(label),
		detached: make(map[Outcome]prometheus.Counter, len(executedOutcomes)),
		churn:    m.keyChurn.WithLabelValues(label),
		report:   m.reportCounts(label),
	}
	for _, o := range executedOutcomes {
		rm.detached[o] = m.detachedEnded.WithLabelValues(label, string(o))
	}
	for p := range numProtocols {
		rm.protocols[p] = m.protocols.WithLabelValues(label, p.String())
	}
	durations := make(map[Result]prometheus.Observer, len(allResults))
	for _, r := range allResults {
		durations[r] = m.requestDuration.WithLabelValues(label, string(r))
	}
	rm.probes = make(map[string]prometheus.Counter, len(probeResults))
	for _, r := range probeResults {
		rm.probes[r] = m.probes.WithLabelValues(label, r)
	}
	for _, o := range allOutcomes {
		rm.outcomes[o] = outcomeMetrics{m.requests.WithLabelValues(label, string(o)), durations[ResultOf(o)]}
	}
	return rm
}

// shadowed creates the shadow series of a route in shadow mode at zero;
// a route in enforce mode has none.
func (m *Metrics) shadowed(label string) map[Would]prometheus.Counter {
	c := make(map[Would]prometheus.Counter, len(allWoulds))
	for _, w := range allWoulds {
		c[w] = m.shadow.WithLabelValues(label, string(w))
	}
	return c
}

type outcomeMetrics struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

// count counts a request r that ended as o after d: by its outcome, and
// by the protocol it came as.
func (rm *routeMetrics) count(r *http.Request, o Outcome, d time.Duration) {
	rm.observe(o, d)
	rm.protocols[protocolOf(r)].Inc()
}

// observe counts an outcome and how long it took: a request's, for count,
// or that of a settlement no client waited for (reconcile.go).
func (rm *routeMetrics) observe(o Outcome, d time.Duration) {
	om := rm.outcomes[o]
	om.requests.Inc()
	om.duration.Observe(d.Seconds())
}

// ObservePing records a readiness ping of the store.
func (m *Metrics) ObservePing(d time.Duration, err error) {
	m.observeStore(opPing, d, err != nil)
}
