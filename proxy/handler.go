// Package proxy is the idempotency proxy's http.Handler: it matches a
// request to its route's policy, parses its idempotency key, takes a lease
// in the store before forwarding the first request upstream, records the
// response, and replays it to every later request with the same key.
package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Handler is the idempotency proxy in front of one upstream.
type Handler struct {
	rp              *httputil.ReverseProxy
	upstreamTimeout time.Duration
	store           Store
	routes          atomic.Pointer[routeTable]
	log             *slog.Logger
	metrics         *Metrics
	owners          owners
	// aborted is set by Abort: upstream calls are detached from their
	// clients, but not from a shutdown that has run out of time.
	aborted atomic.Bool
	// settling counts executed requests whose key is not settled yet,
	// including those retried in the background.
	settling atomic.Int64
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
	}
	if h.upstreamTimeout <= 0 {
		h.upstreamTimeout = 60 * time.Second
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.metrics == nil {
		h.metrics = NewMetrics(prometheus.NewRegistry(), "")
	}
	h.store = meteredStore{opts.Store, h.metrics}
	transport := opts.Transport
	if transport == nil {
		transport = NewTransport()
	}
	h.owners.init()
	h.rp = newReverseProxy(opts.Upstream, transport, h.upstreamError, h.log)
	def := opts.Default
	if def.Header == "" && def.Methods == nil && def.TTL == 0 {
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
	h.routes.Store(t)
	return nil
}

// Abort cancels the upstream calls still running, for a shutdown whose
// grace period has run out. Each one then settles like any upstream failure
// after the request was sent: on_upstream_error decides whether its key is
// released or its 502 recorded.
func (h *Handler) Abort() {
	h.aborted.Store(true)
	h.owners.cancelAll()
}

// Wait blocks until every executed request has settled its key — recorded
// or released, in the background too — or ctx is done. A shutdown calls it
// after the server stopped. It polls: it runs once, at exit.
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

// exchange is the bookkeeping of one request, for metrics and the log line.
type exchange struct {
	start   time.Time
	route   *route
	outcome Outcome
	status  int
	keyHash string
}

// ServeHTTP handles one request: route → pass-through check → key → body →
// fingerprint and storage key → begin in the store → replay, refuse or
// forward.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := exchange{start: time.Now(), outcome: OutcomePassthrough}
	h.metrics.inflight.Inc()
	defer h.finish(r, &x)

	x.route = h.routes.Load().match(r)
	pol := &x.route.policy
	// A real protocol upgrade (WebSocket) hands the connection over: there
	// is no response to record. Any other upgrade offer is dropped.
	if !x.route.protects(r.Method) || isUpgrade(r) {
		h.rp.ServeHTTP(w, r)
		return
	}
	dropUpgrade(r.Header)
	key, err := parseKey(r.Header, pol.Header)
	switch {
	case err == errNoKey && pol.RequireKey:
		h.refuse(w, &x, OutcomeMissingKey, probMissingKey, "This route requires an "+pol.Header+" header on "+r.Method+" requests.")
		return
	case err == errNoKey:
		x.outcome = OutcomeNoKey
		h.rp.ServeHTTP(w, r)
		return
	case err != nil:
		h.refuse(w, &x, OutcomeInvalidKey, probInvalidKey, err.Error()+".")
		return
	}
	keepKeyHeader(r.Header, pol.Header)
	body, err := readBody(r, pol.MaxRequestBody)
	switch {
	case errors.Is(err, errBodyTooLarge):
		h.refuse(w, &x, OutcomeTooLarge, probTooLarge, err.Error())
		return
	case err != nil:
		h.refuse(w, &x, OutcomeBadRequest, probBadBody, "The request body could not be read.")
		return
	}
	h.serveKeyed(w, r, &x, key, body)
}

// serveKeyed decides what a request with a valid key gets.
func (h *Handler) serveKeyed(w http.ResponseWriter, r *http.Request, x *exchange, key string, body []byte) {
	pol := &x.route.policy
	// The one place the host joins the fingerprint; fingerprint_host: false
	// passes "" here.
	host := normalHost(r.Host)
	// The body was read to its end, so the trailers are known.
	fp := fingerprint(r, host, body, pol.FingerprintHeaders)
	skey := storageKey(r, key, x.route.scope)
	x.keyHash = skey

	// Store calls and the upstream call run detached from the client: a
	// Begin cut short could leave a lease nobody holds the token of, and a
	// client that gives up must not cancel the work (docs/guarantees.md). The store
	// bounds each call with its own timeout.
	detached := context.WithoutCancel(r.Context())
	var w8 waiter
	for {
		began := time.Now()
		res, err := h.store.Begin(detached, skey, fp, pol.LockTTL)
		if err != nil {
			h.storeUnavailable(w, r, x, body, err)
			return
		}
		switch {
		case res.State == store.Acquired:
			h.execute(detached, w, r, x, skey, res.Token, fp, body, began)
			return
		case res.Fingerprint != fp:
			h.refuse(w, x, OutcomeMismatch, probMismatch, "This idempotency key was first used with a different request (method, path, query, headers or body). Use a new key for a new operation.")
			return
		case res.State == store.Completed:
			x.outcome, x.status = OutcomeReplayed, res.Record.Status
			replay(w, r, res.Record, pol.ReplayExcludeHeaders)
			return
		case pol.Concurrent != Wait:
			h.refuse(w, x, OutcomeConflict, probInFlight, "A request with this idempotency key is still being processed. Retry after it completes.")
			return
		}
		// In flight, and this route waits for the first request to finish.
		if !w8.wait(r.Context(), h.owners.done(skey), pol.WaitTimeout) {
			h.refuse(w, x, OutcomeConflict, probInFlight, "A request with this idempotency key was still being processed after waiting "+pol.WaitTimeout.String()+". Retry later.")
			return
		}
	}
}

// storeUnavailable applies on_store_error to a store that could not take
// the key: unreachable, or full.
func (h *Handler) storeUnavailable(w http.ResponseWriter, r *http.Request, x *exchange, body []byte, err error) {
	full := errors.Is(err, store.ErrFull)
	if x.route.policy.FailOpen {
		x.outcome = OutcomeStoreBypassed
		h.log.Warn("store unavailable, forwarding without idempotency protection",
			"route", x.route.label, "key_hash", x.keyHash, "store_full", full, "error", err)
		r.Body = newBodyReader(body)
		h.rp.ServeHTTP(w, r)
		return
	}
	h.log.Warn("store unavailable, rejecting request", "route", x.route.label, "key_hash", x.keyHash, "store_full", full, "error", err)
	if full {
		h.refuse(w, x, OutcomeStoreRejected, probStoreFull, "The idempotency store is full and cannot take new keys, so the request was not forwarded. It is safe to retry with the same key once records expire or the store is enlarged.")
		return
	}
	h.refuse(w, x, OutcomeStoreRejected, probStore, "The idempotency store is unavailable, so the request was not forwarded. It is safe to retry with the same key.")
}

func (h *Handler) refuse(w http.ResponseWriter, x *exchange, o Outcome, p problem, detail string) {
	x.outcome, x.status = o, p.Status
	writeProblem(w, p, detail)
}

// finish observes the request's metrics and logs its line. It is deferred,
// so it also runs when the reverse proxy aborts a half-written response.
func (h *Handler) finish(r *http.Request, x *exchange) {
	h.metrics.inflight.Dec()
	if x.route == nil { // a panic before the route was known
		return
	}
	label := x.route.label
	d := time.Since(x.start)
	x.route.metrics.observe(x.outcome, d)
	if x.outcome != OutcomePassthrough && h.log.Enabled(r.Context(), slog.LevelDebug) {
		h.log.LogAttrs(r.Context(), slog.LevelDebug, "request",
			slog.String("route", label), slog.String("method", r.Method),
			slog.String("outcome", string(x.outcome)), slog.Int("status", x.status),
			slog.Float64("duration_seconds", d.Seconds()), slog.String("key_hash", x.keyHash))
	}
}
