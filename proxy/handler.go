// Package proxy is the idempotency proxy's http.Handler: it matches a
// request to its route's policy, parses its idempotency key, takes a lease
// in the store before forwarding the first request upstream, records the
// response, and replays it to every later request with the same key.
package proxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idempotency-proxy/idempotency-proxy/internal/jsonread"
	"github.com/idempotency-proxy/idempotency-proxy/internal/lograte"
	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Handler is the idempotency proxy in front of one upstream.
type Handler struct {
	rp              *httputil.ReverseProxy
	upstreamTimeout time.Duration
	maxExecution    time.Duration
	detachable      execution.DetachBudget
	store           meteredStore
	forgetter       forgetter // the store's Delete, when it has one
	inspector       inspector // the store's Inspect, for reconcile markers
	upstream        *url.URL  // where lookups of unknown outcomes go
	async           asyncStatus
	transport       http.RoundTripper
	routes          atomic.Pointer[routeTable]
	log             *slog.Logger
	metrics         *Metrics
	observe         func(*http.Request, Observation)
	instance        string // names this process in its leases
	owners          execution.Owners
	callers         *execution.Callers[*request] // run the upstream calls
	clock           execution.Clock
	// aborted is set by Abort: upstream calls are detached from their
	// clients, but not from a shutdown that has run out of time.
	aborted atomic.Bool
	// settling counts executed requests whose key is not settled yet,
	// including those retried in the background.
	settling atomic.Int64
	// settler settles executed requests' keys (execution.Settling).
	settler execution.Settler
	// accessLog is Options.AccessLog, as SetAccessLog last set it.
	accessLog atomic.Bool
	accessOut io.Writer // Options.AccessLogOutput
	// accessFormat is the access line's fields and trusted proxies, as
	// Options or SetAccessLogFormat last set them.
	accessFormat atomic.Pointer[accessFormat]
	// bypassLog and refuseLog keep the store-unavailable warnings, due on
	// every request while the store is down, to one a period: the access
	// line has each request's outcome and key_hash.
	bypassLog, refuseLog *lograte.Limiter
	// undecodableLog keeps the warning of a record whose body does not
	// decode, due on each of its replays to a client that does not accept
	// its coding, to one a period.
	undecodableLog *lograte.Limiter

	// reconciling maps the storage key of each key whose unknown outcome
	// this process settles to its *reconciliation, for the key API.
	reconciling sync.Map
}

var _ http.Handler = (*Handler)(nil)

// New returns a Handler forwarding to opts.Upstream.
func New(opts Options) (*Handler, error) {
	if opts.Upstream == nil || opts.Upstream.Host == "" {
		return nil, errors.New("proxy: an upstream URL with a host is required")
	}
	if opts.Store == nil {
		return nil, errors.New("proxy: a store is required")
	}
	h := &Handler{
		upstreamTimeout: opts.UpstreamTimeout,
		log:             opts.Logger,
		metrics:         opts.Metrics,
		observe:         opts.Observe,
		instance:        cmp.Or(opts.Instance, DefaultInstance()),
		clock:           execution.RealClock{},
	}
	if h.upstreamTimeout <= 0 {
		h.upstreamTimeout = DefaultUpstreamTimeout
	}
	h.maxExecution = cmp.Or(opts.MaxExecution, DefaultMaxExecution)
	h.detachable.MaxN = int64(cmp.Or(opts.MaxDetached, DefaultMaxDetached))
	h.detachable.MaxBytes = cmp.Or(opts.MaxDetachedBytes, DefaultMaxDetachedBytes)
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.metrics == nil {
		h.metrics = NewMetrics(prometheus.NewRegistry(), "")
	}
	h.async = asyncStatus{path: cmp.Or(opts.AsyncPath, DefaultAsyncPath), secret: opts.AsyncSecret}
	h.store = meteredStore{opts.Store, h.metrics, &h.clock}
	h.settler = execution.Settler{Store: &h.store, Clock: &h.clock, Log: h.log, LockLost: h.metrics.lockLost, BodyOmitted: h.metrics.bodyOmitted}
	h.forgetter, _ = opts.Store.(forgetter)
	h.inspector, _ = opts.Store.(inspector)
	transport := opts.Transport
	if transport == nil {
		transport = NewTransportFor(opts.UpstreamProtocol)
	}
	h.upstream, h.transport = opts.Upstream, transport
	h.owners.Init()
	h.callers = execution.NewCallers(h.call, execution.MaxIdleCallers, execution.CallerIdleTimeout)
	h.accessLog.Store(opts.AccessLog)
	h.accessOut = cmp.Or[io.Writer](opts.AccessLogOutput, io.Discard)
	if err := h.SetAccessLogFormat(opts.AccessLogFields, opts.TrustedProxies); err != nil {
		return nil, err
	}
	h.bypassLog, h.refuseLog = lograte.New(lograte.Period), lograte.New(lograte.Period)
	h.undecodableLog = lograte.New(lograte.Period)
	h.rp = newReverseProxy(opts.Upstream, transport, speaksHTTP2(opts.UpstreamProtocol, transport), h.upstreamError, h.log)
	def := opts.Default
	if reflect.ValueOf(def).IsZero() {
		// Only a policy nobody set: one that sets any field, however few,
		// is checked as it is rather than silently replaced.
		def = DefaultPolicy()
	}
	if err := h.SetRoutes(def, opts.Routes); err != nil {
		return nil, err
	}
	return h, nil
}

// SetRoutes replaces the default policy and the routes. Requests already
// being served keep the policy they started with.
func (h *Handler) SetRoutes(def Policy, routes []Route) error {
	t, err := newRouteTable(def, routes, h.metrics)
	if err != nil {
		return err
	}
	if err := h.canReconcile(def, routes); err != nil {
		return err
	}
	if old := h.routes.Load(); old != nil {
		t.adoptChurn(old)
	}
	h.routes.Store(t)
	h.metrics.keepReportsOf(t)
	return nil
}

// canReconcile refuses on_upstream_error: reconcile on a store that cannot
// read or delete a key's marker: without them the key's next owner could
// not tell it is being settled, and would forward it again.
func (h *Handler) canReconcile(def Policy, routes []Route) error {
	if h.inspector != nil && h.forgetter != nil {
		return nil
	}
	check := func(name string, p Policy) error {
		if p.OnUpstreamError != UpstreamErrorReconcile {
			return nil
		}
		return fmt.Errorf("route %s: on_upstream_error: reconcile needs a store that can inspect and delete keys (memory, redis, postgres, file); use keep or release with this store", name)
	}
	if err := check(defaultRoute, def); err != nil {
		return err
	}
	for _, r := range routes {
		if err := check(r.Pattern, r.Policy); err != nil {
			return err
		}
	}
	return nil
}

// Abort cancels the upstream calls still running, detached ones included,
// for a shutdown whose grace period has run out. A client still waiting
// gets a 502 shutting-down. A call that reached the upstream keeps its
// lease, neither released nor recorded: the upstream may still be running
// it, so its key stays locked until lock_ttl, as after a crash. One that
// never reached it is released.
func (h *Handler) Abort() {
	h.aborted.Store(true)
	h.owners.CancelAll()
}

// Wait blocks until every executed request has settled its key — recorded
// or released, detached calls and background retries too — or ctx is done.
// A shutdown calls it after the server stopped. It polls: it runs once, at
// exit.
func (h *Handler) Wait(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for h.settling.Load() > 0 {
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// ServeHTTP handles one request: route → pass-through check → identify
// (key, body, fingerprint and storage key) → serveKeyed: begin in the
// store → replay, refuse or execute.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := newRequest(r)
	h.metrics.inflight.Inc()
	defer h.finish(q)
	if h.accessLog.Load() {
		w = q.counting(w)
	}

	// The method and path as routes, fingerprints and key namespaces read
	// them; the request is forwarded as sent.
	if h.async.serves(r) {
		h.serveStatus(w, r)
		return
	}
	q.target = readTarget(r)
	routes := h.routes.Load()
	if routes.methodsMatter && q.target.own == http.MethodPost {
		// A POST's _method, in its query or a form's or a JSON body, where
		// the method it names could change its route or its protection
		// (methodparam.go): the body read for it is the request's when it
		// is all of it, and is forwarded as sent in any case, read again
		// through q's reader (passThrough).
		var whole bool
		if q.body, whole = readMethodParams(r, &q.target, routes.maxBody, &q.bodyReader); whole {
			q.bodyRead = true
		} else {
			q.body = nil
		}
	}
	q.route = routes.match(r, &q.target)
	if q.target.refuse != 0 {
		h.refuse(w, q, q.target.refuse, nil)
		return
	}
	// A real protocol upgrade (WebSocket) hands the connection over: there
	// is no response to record. Any other upgrade offer is dropped.
	if !q.route.protectsTarget(&q.target) || isUpgrade(r) && q.target.method == http.MethodGet {
		if q.route.policy.GraphQL && h.graphqlInQueryString(w, q) {
			return
		}
		h.passThrough(w, q, r)
		return
	}
	if !q.target.lacks(scanConnection | scanUpgrade) {
		dropUpgrade(r.Header)
	}
	if !h.identify(w, q) {
		return
	}
	h.serveKeyed(w, q)
}

// identify fills q's identity: its key, its body, its fingerprint and
// storage key, its description and, on a route that reconciles, its
// lookup. It answers the request itself, and returns false, when there is
// nothing more to do: no key (passed through, or refused), a key or body
// it refuses. From here on q's identity is read only.
func (h *Handler) identify(w http.ResponseWriter, q *request) bool {
	r, pol := q.in, &q.route.policy
	haveBody := false
	// form is what the fingerprint hashes in place of the body: a GraphQL
	// mutation's canonical form, a compressed gRPC message decompressed.
	var form []byte
	var key string // a GraphQL mutation's @idempotent key
	if isGRPC(r) {
		q.grpc, q.grpcWait = true, grpcWait(r)
		msg, plain, ok := h.readGRPC(w, q)
		if !ok {
			return false
		}
		q.body, form, haveBody = msg, plain, true // a unary call's one message
	} else if pol.GraphQL {
		// Only a mutation is protected, and it may carry its own key.
		var ok bool
		if form, key, ok = h.readGraphQL(w, q); !ok {
			return false
		}
		haveBody = true
	}
	var from KeySourceKind
	var err error
	var plain []byte // the body decoded from its Content-Encoding, for json: sources
	if key == "" {
		if haveBody {
			plain = inflated(r, q.body, pol.MaxRequestBody)
		}
		key, from, err = requestKeyFromDecoded(r, q.route.sources, q.body, plain, haveBody)
	}
	if err == errNeedBody {
		// A source reads the body: read it once, bounded, and look again.
		// The sources read it in place, and the fingerprint hashes it.
		if !h.readBody(w, q) {
			return false
		}
		haveBody = true
		plain = inflated(r, q.body, pol.MaxRequestBody)
		key, from, err = requestKeyFromDecoded(r, q.route.sources, q.body, plain, true)
	}
	// errNoKey, the common case, is tested before errors.Is walks a
	// chain it is not in.
	switch {
	case err == errNoKey && pol.RequireKey:
		h.refuse(w, q, failMissingKey, err)
		return false
	case err == errNoKey:
		q.outcome = OutcomeNoKey
		if haveBody {
			setBody(r, q.body, nil)
		}
		h.passThrough(q.unrecorded(w), q, r)
		dropControlTrailers(w.Header(), pol.UpstreamControlHeader)
		return false
	case errors.Is(err, jsonread.ErrDuplicateName):
		h.refuse(w, q, failAmbiguousBody, err)
		return false
	case err != nil:
		h.refuse(w, q, failInvalidKey, err)
		return false
	}
	q.key, q.keyFrom = key, from
	if err := scopeCookiesReadOneWay(r.Header, q.route.scope); err != nil {
		h.refuse(w, q, failInvalidKey, err)
		return false
	}
	if !q.target.lacks(scanConnection) {
		keepKeyHeaders(r.Header, q.route.sources)
	}
	if !haveBody && !h.readBody(w, q) {
		return false
	}
	if err := h.fingerprintAndKey(q, form); err != nil {
		h.refuse(w, q, failAmbiguousBody, err)
		return false
	}
	if q.route.reconciles() {
		if plain == nil { // no json: key source decoded it
			plain = inflated(r, q.body, pol.MaxRequestBody)
		}
		body := q.body
		if plain != nil {
			body = plain
		}
		target, err := q.route.probe.fill(r, q.key, body)
		if err != nil {
			// A placeholder the request cannot fill refuses it now,
			// before anything is locked: never a lookup with a hole later.
			h.refuse(w, q, failProbeHole, err)
			return false
		}
		q.probeTarget = target
	}
	return true
}

// readBody reads q's body, bounded by max_request_body, and refuses the
// request when it cannot.
func (h *Handler) readBody(w http.ResponseWriter, q *request) bool {
	var err error
	limit := q.route.policy.MaxRequestBody
	switch {
	case !q.bodyRead:
		q.body, err = readBody(q.in, limit)
	case int64(len(q.body)) > limit:
		// Read whole for its _method parameters, within the largest
		// route's limit; q.in.Body reads it again.
		q.body, q.bodyRead, err = nil, false, tooLarge(limit)
	}
	switch {
	case errors.Is(err, errBodyTooLarge):
		if q.route.policy.Mode == ModeShadow && q.body != nil {
			q.in.Body, q.body = prefixedBody(q.body, q.in.Body), nil
		}
		h.refuse(w, q, failBodyTooLarge, err)
		return false
	case err != nil:
		h.refuse(w, q, failBodyUnreadable, err)
		return false
	}
	return true
}

// serveKeyed decides what a request with a valid key gets.
func (h *Handler) serveKeyed(w http.ResponseWriter, q *request) {
	r, pol := q.in, &q.route.policy
	// Store calls and the upstream call run detached from the client: a
	// Begin cut short could leave a lease nobody holds the token of, and a
	// client that gives up must not cancel the work (docs/guarantees.md).
	// The store bounds each call with its own timeout.
	detached := context.WithoutCancel(r.Context())
	lease := store.Lease{Fingerprint: q.fp, Request: q.desc, Instance: h.instance}
	var pace waiter
	urlGiven := false // this request marked its key's status URL given
	for {
		q.began = h.clock.Now()
		res, err := h.store.beginFrom(detached, q.began, q.keyHash, lease, pol.LockTTL)
		if err == nil && res.State == store.Completed && res.Record.Sealed != nil {
			// Sealed, and no keyring opened it (store/seal).
			err = &store.SealError{KeyID: res.Record.Sealed.KeyID, Err: store.ErrKeyUnknown}
		}
		if errors.Is(err, store.ErrUnreadable) {
			h.unreadable(w, q, err)
			return
		}
		if err != nil {
			h.storeUnavailable(w, q, err)
			return
		}
		switch {
		case res.State == store.Acquired:
			q.token = res.Token
			h.countChurn(q) // the key is new
			if q.route.reconciles() && h.takeOver(w, q, detached) {
				return
			}
			if pol.OnUpstreamError == UpstreamErrorReconcile && q.route.reconciles() && !h.markPending(detached, w, q) {
				return
			}
			if h.wantsAsync(q) {
				h.executeAsync(detached, w, q)
				return
			}
			h.execute(detached, w, q)
			return
		case res.State == store.Expired && pol.ExpiredKeys == ExpiredReject:
			q.expiredAt = res.ExpiredAt
			h.refuse(w, q, failKeyExpired, nil)
			return
		case res.State == store.Expired:
			// A tombstone the route no longer asks for (a reload turned
			// reject off): the key is new. Begin again, without looking.
			if err := h.forgetExpired(detached, q); err != nil {
				h.storeUnavailable(w, q, err)
				return
			}
			continue
		case res.Fingerprint != q.fp:
			h.refuse(w, q, failMismatch, nil)
			return
		case res.State == store.Completed && pol.Mode == ModeShadow:
			h.shadow(w, q, WouldReplay)
			return
		case res.State == store.Completed:
			q.outcome, q.status = OutcomeReplayed, res.Record.Status
			h.replayRecord(w, q, res.Record)
			return
		}
		q.heldSince = res.Lease.Request.StartedAt
		if h.wantsAsync(q) {
			// Still running: the same 202 as the first got, not 409. The
			// status URL is marked given first, and the key asked again:
			// either the call still ran after the mark, and its release
			// leaves a note, or it was released, and this request takes
			// the key (markStatusURLGiven).
			if !urlGiven {
				urlGiven = true
				h.markStatusURLGiven(detached, q)
				continue
			}
			h.accepted(w, q)
			return
		}
		if pol.Concurrent != ConcurrentWait || pol.Mode == ModeShadow {
			f := failInFlight
			if q.route.reconciles() && h.settlingElsewhere(detached, q) {
				f = failInFlightSettling
			}
			h.refuse(w, q, f, nil)
			return
		}
		// In flight, and this route waits for the first request to finish.
		if !pace.wait(r.Context(), h.clock, h.owners.Done(q.keyHash), pol.WaitTimeout) {
			h.refuse(w, q, failWaitedTooLong, nil)
			return
		}
	}
}

// forgetter deletes a key, and the tombstone of its expired record.
type forgetter interface {
	Delete(ctx context.Context, key string) error
}

// forgetExpired deletes the tombstone of q's key, which a route that
// forgets expired keys found (a reload turned expired_keys: reject off):
// the key is then new.
func (h *Handler) forgetExpired(ctx context.Context, q *request) error {
	if h.forgetter == nil {
		return fmt.Errorf("forget expired key: %w", store.ErrUnavailable)
	}
	if err := h.forgetter.Delete(ctx, q.keyHash); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return nil
}

// unreadable refuses a key whose record cannot be read: its encryption
// key was removed, its bytes were changed or copied from another key, or
// it is a newer version's record during a rolling upgrade. The key was
// executed, so forwarding would execute it again, whatever on_store_error
// says; it gets this answer until an operator restores the key or deletes
// the record.
func (h *Handler) unreadable(w http.ResponseWriter, q *request, err error) {
	reason := store.UnreadableReason(err)
	h.metrics.unreadable[reason].Inc()
	var keyID string
	if se := (*store.SealError)(nil); errors.As(err, &se) {
		keyID = se.KeyID
	}
	h.log.Error("recorded response unreadable: the key is refused and not executed again",
		"route", q.route.label, "key_hash", q.keyHash, "reason", reason, "key_id", keyID, "error", err)
	h.refuse(w, q, failRecordUnreadable, err)
}

// storeUnavailable applies on_store_error to a store that could not take
// the key: unreachable, or full.
func (h *Handler) storeUnavailable(w http.ResponseWriter, q *request, err error) {
	h.countChurn(q) // whether the key is new is not known
	full := errors.Is(err, store.ErrFull)
	if q.route.policy.Mode == ModeShadow {
		h.log.Warn("store unavailable, forwarding as the route is in shadow mode",
			"route", q.route.label, "key_hash", q.keyHash, "store_full", full, "error", err)
		h.shadow(w, q, WouldStoreUnavailable)
		return
	}
	if q.route.policy.OnStoreError == FailOpen {
		q.outcome = OutcomeStoreBypassed
		if ok, n := h.bypassLog.Allow(h.clock.Now()); ok {
			h.log.Warn("store unavailable, forwarding without idempotency protection",
				"route", q.route.label, "key_hash", q.keyHash, "store_full", full, "error", err, "suppressed", n)
		}
		setBody(q.in, q.body, nil)
		h.rp.ServeHTTP(q.unrecorded(w), q.in)
		dropControlTrailers(w.Header(), q.route.policy.UpstreamControlHeader)
		return
	}
	if ok, n := h.refuseLog.Allow(h.clock.Now()); ok {
		h.log.Warn("store unavailable, rejecting request", "route", q.route.label, "key_hash", q.keyHash, "store_full", full, "error", err, "suppressed", n)
	}
	if full {
		h.refuse(w, q, failStoreFull, err)
		return
	}
	h.refuse(w, q, failStoreUnavailable, err)
}

// finish observes the request's metrics and logs its line. It is deferred,
// so it also runs when the reverse proxy aborts a half-written response.
func (h *Handler) finish(q *request) {
	h.metrics.inflight.Dec()
	defer q.free()
	if q.route == nil || q.reportLater { // a panic before the route was known; a client gone
		return
	}
	h.report(q, q.outcome, q.status)
}

// report observes a request's metrics and logs its line.
func (h *Handler) report(q *request, outcome Outcome, status int) {
	d := time.Since(q.start)
	q.route.metrics.count(q.in, outcome, d)
	q.route.metrics.report.outcome(q.start, outcome, q.keyHash != "")
	if h.observe != nil {
		o := Observation{Outcome: outcome, KeyHash: q.keyHash}
		if q.route.label != defaultRoute {
			o.Route = q.route.label
		}
		h.observe(q.in, o)
	}
	if ctx := q.in.Context(); outcome != OutcomePassthrough && h.log.Enabled(ctx, slog.LevelDebug) {
		h.log.LogAttrs(ctx, slog.LevelDebug, "request",
			slog.String("route", q.route.label), slog.String("method", q.in.Method),
			slog.String("path", q.in.URL.Path),
			slog.String("outcome", string(outcome)), slog.Int("status", status),
			slog.Float64("duration_seconds", d.Seconds()), slog.String("key_hash", q.keyHash))
	}
	if q.out != nil {
		h.logAccess(q, outcome, status, d)
	}
}
