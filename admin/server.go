// Package admin serves the proxy's admin listener: Prometheus metrics,
// liveness and readiness, the operator key API under /admin/ and, when
// enabled, net/http/pprof. It is never reachable through the proxy listener.
//
// The key API (docs/operating.md, "Operator key API") is off unless a token
// is configured: every /admin/ path answers 404. With a token, every
// /admin/ request — and /debug/pprof/ — needs Authorization: Bearer TOKEN.
package admin

import (
	"context"
	"github.com/idempotency-proxy/idempotency-proxy/internal/adoption"
	"log"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Timeouts of the admin listener. Scrapers and kubelets keep connections
// alive between requests; without an idle timeout every one they ever
// opened stays open. There is no write timeout: /debug/pprof/profile and
// /debug/pprof/trace stream for the number of seconds asked.
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 30 * time.Second
	IdleTimeout       = 60 * time.Second
	maxHeaderBytes    = 64 << 10
)

// Pinger is what readiness needs from the store.
type Pinger interface {
	Ping(ctx context.Context) error
}

// HealthReporter is a store that can say more than "it answers": its
// eviction policy and whether it is full.
type HealthReporter interface {
	Health(ctx context.Context) (store.Health, error)
}

// Keys is what the key API needs from the store. A delete of a lease
// fences its owner: the running request's completion then fails as a lost
// lease.
type Keys interface {
	Inspect(ctx context.Context, key string) (store.Entry, error)
	Delete(ctx context.Context, key string) error
	// List returns up to limit entries in state (0: any) from cursor ("":
	// the start) and the cursor of the next page, "" when done.
	List(ctx context.Context, state store.State, cursor string, limit int) ([]store.Entry, string, error)
}

// Hasher computes the storage key a request with an idempotency key would
// use under the live configuration (proxy.Handler.KeyHash).
type Hasher interface {
	// KeyHashFrom hashes key as found by the route's key source named
	// source ("" for its first); an empty key is found in r, body
	// included (proxy.Handler.KeyHashFrom).
	KeyHashFrom(r *http.Request, key, source string) (string, error)
}

// Options configure the admin handler. Store is required; the rest may be
// nil, which disables what needs it.
type Options struct {
	// Store is pinged by /readyz. If it also implements HealthReporter its
	// health is reported there, and if it implements Keys the key API
	// serves it.
	Store Pinger
	// Gatherer is exposed on /metrics.
	Gatherer prometheus.Gatherer
	// Metrics counts admin operations and store health; nil means a
	// private registry.
	Metrics *Metrics
	// Token holds the bearer token; empty (or nil) turns /admin/ off.
	Token *Token
	// Hasher serves POST /admin/hash.
	Hasher Hasher
	// Config serves GET /admin/config: the effective configuration as
	// YAML, each value's origin noted, secrets masked (config.View).
	Config func() []byte
	// Report serves GET /admin/report: the adoption report over the last
	// window (proxy.Handler.Report).
	Report func(window time.Duration) adoption.Report
	// PProf serves /debug/pprof/, behind the token when one is set.
	PProf bool
	// ObservePing, when set, is told the duration and result of every
	// readiness ping.
	ObservePing func(d time.Duration, err error)
	// ReadyTimeout bounds the store calls of one /readyz; zero means 1s.
	ReadyTimeout time.Duration
	// Logger receives deletes (warn) and store health problems (error).
	Logger *slog.Logger
	// Settling reports a key whose unknown outcome this process settles
	// by lookups (on_upstream_error: reconcile): since when, and the
	// lookups sent; nil reports none.
	Settling func(keyHash string) (since time.Time, probes int64, ok bool)
	// LockTTLs returns the live lock_ttl of each route (and "default"),
	// checked against the store's failover time; nil checks nothing.
	LockTTLs func() map[string]time.Duration
}

// Handler is the admin listener's http.Handler.
type Handler struct {
	mux     *http.ServeMux
	opts    Options
	keys    Keys   // nil when the store has no operator methods
	health  health // readiness and eviction state
	log     *slog.Logger
	metrics *Metrics
	token   *Token
	// draining is set by Drain: the process is shutting down.
	draining atomic.Bool
}

var _ http.Handler = (*Handler)(nil)

// Drain turns /readyz to 503 for good, so that load balancers and
// Kubernetes stop sending requests to a proxy that is shutting down;
// /healthz keeps answering 200 until the process exits.
func (h *Handler) Drain() { h.draining.Store(true) }

// New returns the admin handler.
func New(opts Options) *Handler {
	h := &Handler{opts: opts, log: opts.Logger, metrics: opts.Metrics, token: opts.Token}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.metrics == nil {
		h.metrics = NewMetrics(prometheus.NewRegistry())
	}
	if h.token == nil {
		h.token = NewToken("")
	}
	if h.opts.ReadyTimeout <= 0 {
		h.opts.ReadyTimeout = time.Second
	}
	h.keys, _ = opts.Store.(Keys)
	h.health.init(opts.Store, h.metrics, h.log, opts.LockTTLs)

	mux := http.NewServeMux()
	if opts.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", h.serveReady)
	mux.HandleFunc("GET /{$}", h.serveIndex)
	h.routeKeys(mux)
	if opts.PProf {
		routePProf(mux, h.token)
	}
	h.mux = mux
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// CheckStore pings the store and reads its health once, logging what is
// wrong: the start-up check. The proxy runs whatever it finds (readiness
// answers 503 until the store does).
func (h *Handler) CheckStore(ctx context.Context) error {
	return h.health.check(ctx, h.opts.ReadyTimeout, h.opts.ObservePing).err
}

// WatchStore checks the store every interval until ctx ends, as /readyz
// does, so that a store that forgot its data or a lock_ttl too short for a
// failover is logged and counted within that interval.
func (h *Handler) WatchStore(ctx context.Context, every time.Duration) {
	h.health.watch(ctx, every, h.opts.ReadyTimeout, h.opts.ObservePing)
}

// NewServer returns the admin listener's server around h, with the
// listener's timeouts; errorLog receives the server's own errors.
func NewServer(h http.Handler, errorLog *log.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          errorLog,
	}
}
