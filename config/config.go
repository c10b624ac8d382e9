package config

import (
	"errors"
	"log/slog"
	"net/url"
	"slices"
	"time"
)

// ErrInvalid is wrapped by every *Problem, so callers can tell a configuration
// mistake (exit status 2) from anything else with errors.Is.
var ErrInvalid = errors.New("invalid configuration")

// Problem is one thing wrong with the configuration, located by the dotted key
// path an operator would search for in the file ("routes[1].ttl"), or by the
// environment variable or file that carried it.
type Problem struct {
	Path   string
	Reason string
}

func (p *Problem) Error() string { return p.Path + ": " + p.Reason }

// Unwrap makes errors.Is(err, ErrInvalid) true for every problem.
func (p *Problem) Unwrap() error { return ErrInvalid }

// Config is the whole, validated configuration of the proxy.
type Config struct {
	// Listen is the proxy listener address, host:port.
	Listen string
	// AdminListen serves /metrics, /healthz and /readyz, host:port.
	AdminListen string
	// LogLevel is the minimum level of the JSON logs on stderr.
	LogLevel slog.Level
	// ShutdownTimeout bounds the drain of in-flight requests on SIGTERM/SIGINT.
	ShutdownTimeout time.Duration
	Upstream        Upstream
	Store           Store
	Admin           Admin
	Tracing         Tracing
	// Defaults is the policy of every request no route matches, and the base
	// every route inherits from.
	Defaults Policy
	// Routes hold effective policies: keys a route does not set come from Defaults.
	Routes []Route
	// File is the path of the configuration file used, "" when none.
	File string
}

// Upstream is the service the proxy protects.
type Upstream struct {
	// URL is http or https with a host; its path is a prefix for proxied paths.
	URL *url.URL
	// Timeout bounds the whole upstream exchange, body included.
	Timeout time.Duration
}

// Store kinds.
const (
	StoreMemory = "memory"
	StoreRedis  = "redis"
)

// Store selects and configures where keys, locks and responses are kept.
type Store struct {
	// Kind is StoreMemory or StoreRedis; Load always sets it. "" (as in
	// Default) means redis when Redis.URL or Redis.Addrs is set, else memory.
	Kind   string
	Memory MemoryStore
	Redis  RedisStore
}

// kind resolves an empty Kind the way the contract says: setting a Redis
// address is enough to use Redis.
func (s Store) kind() string {
	switch {
	case s.Kind != "":
		return s.Kind
	case s.Redis.URL != "" || len(s.Redis.Addrs) > 0:
		return StoreRedis
	default:
		return StoreMemory
	}
}

// MemoryStore configures the in-process store.
type MemoryStore struct {
	// MaxBytes bounds the recorded data; when full, WhenFull decides.
	MaxBytes Size
	// WhenFull is WhenFullReject (new keys get the store-full answer of
	// on_store_error) or WhenFullEvictOldest (the oldest completed records
	// are dropped; a lease never is).
	WhenFull string
}

// Words accepted by MemoryStore.WhenFull.
const (
	WhenFullReject      = "reject"
	WhenFullEvictOldest = "evict_oldest"
)

// Admin configures the operator API on the admin listener.
type Admin struct {
	// Token enables /admin/ and is the bearer token it requires. Prefer
	// setting it through the environment (IDEMPOTENCY_PROXY_ADMIN_TOKEN).
	Token string
	// TokenFile names a file holding the token instead; it is read again
	// on every reload. Not both.
	TokenFile string
	// PProf serves /debug/pprof/ on the admin listener, behind the token
	// when one is set.
	PProf bool
}

// Tracing configures OpenTelemetry tracing; the exporter itself is
// configured by the standard OTEL_* environment variables.
type Tracing struct {
	// Enabled exports a span per proxied request over OTLP.
	Enabled bool
}

// RedisStore configures the Redis store: URL for one node, Addrs for a
// cluster, or Addrs with MasterName for Sentinel.
type RedisStore struct {
	// URL is redis:// or rediss:// (TLS), credentials and database included.
	URL string
	// Addrs are host:port seeds of a cluster, or Sentinel addresses.
	Addrs []string
	// MasterName selects Sentinel mode.
	MasterName string
	// KeyPrefix starts every key the proxy writes.
	KeyPrefix string
	// Timeout bounds each store operation.
	Timeout time.Duration
}

// Words accepted by Policy.Concurrent, Policy.OnStoreError and
// Policy.OnUpstreamError.
const (
	ConcurrentReject = "reject"
	ConcurrentWait   = "wait"

	FailClosed = "fail_closed"
	FailOpen   = "fail_open"

	UpstreamErrorRelease = "release"
	UpstreamErrorKeep    = "keep"
)

// Policy is the idempotency behaviour of the defaults or of one route.
type Policy struct {
	// Header is the canonical name of the idempotency key header.
	Header string
	// Methods are the protected methods, upper case; others pass through.
	Methods []string
	// RequireKey answers 400 to a protected request without a key.
	RequireKey bool
	// TTL is how long a completed response is replayed.
	TTL time.Duration
	// LockTTL is the lease on an in-flight key, renewed while the upstream runs.
	LockTTL time.Duration
	// Concurrent is ConcurrentReject (409) or ConcurrentWait.
	Concurrent string
	// WaitTimeout bounds the wait under ConcurrentWait.
	WaitTimeout time.Duration
	// OnStoreError is FailClosed (503) or FailOpen (forward unprotected).
	OnStoreError string
	// OnUpstreamError decides an ambiguous upstream failure:
	// UpstreamErrorRelease (at-least-once) or UpstreamErrorKeep (at-most-once).
	OnUpstreamError string
	// ReleaseStatuses are delivered but not recorded; the key is released.
	ReleaseStatuses []int
	// MaxRequestBody is the largest request body accepted (413 beyond).
	MaxRequestBody Size
	// MaxResponseBody is the largest response body recorded; larger bodies
	// are delivered and recorded without the body.
	MaxResponseBody Size
	// ScopeHeaders namespace keys per value (per client).
	ScopeHeaders []string
	// FingerprintHeaders join method, path, query and body in the fingerprint.
	FingerprintHeaders []string
	// ReplayExcludeHeaders are recorded but not replayed.
	ReplayExcludeHeaders []string
}

// Route is a ServeMux pattern with its effective policy.
type Route struct {
	// Match is a Go ServeMux pattern; it is also the metrics route label.
	Match string
	// Enabled false makes the route a plain pass-through.
	Enabled bool
	Policy
}

// Default returns the built-in defaults. Upstream.URL is nil: it has no
// default and must be configured.
func Default() *Config {
	return &Config{
		Listen:          ":8080",
		AdminListen:     ":9090",
		LogLevel:        slog.LevelInfo,
		ShutdownTimeout: 30 * time.Second,
		Upstream:        Upstream{Timeout: 60 * time.Second},
		Store: Store{
			Memory: MemoryStore{MaxBytes: 256 * MiB, WhenFull: WhenFullReject},
			Redis: RedisStore{
				Addrs:     []string{},
				KeyPrefix: "idem:",
				Timeout:   250 * time.Millisecond,
			},
		},
		Defaults: DefaultPolicy(),
		Routes:   []Route{},
	}
}

// DefaultPolicy returns the built-in policy.
func DefaultPolicy() Policy {
	return Policy{
		Header:               "Idempotency-Key",
		Methods:              []string{"POST", "PUT", "PATCH", "DELETE"},
		TTL:                  24 * time.Hour,
		LockTTL:              30 * time.Second,
		Concurrent:           ConcurrentReject,
		WaitTimeout:          10 * time.Second,
		OnStoreError:         FailClosed,
		OnUpstreamError:      UpstreamErrorRelease,
		ReleaseStatuses:      []int{408, 425, 429, 503},
		MaxRequestBody:       10 * MiB,
		MaxResponseBody:      1 * MiB,
		ScopeHeaders:         []string{"Authorization"},
		FingerprintHeaders:   []string{"Content-Type"},
		ReplayExcludeHeaders: []string{"Date", "Set-Cookie"},
	}
}

// clone returns a copy that shares no slice with p, so a route can change
// its lists without touching the defaults it inherited them from.
func (p Policy) clone() Policy {
	p.Methods = slices.Clone(p.Methods)
	p.ReleaseStatuses = slices.Clone(p.ReleaseStatuses)
	p.ScopeHeaders = slices.Clone(p.ScopeHeaders)
	p.FingerprintHeaders = slices.Clone(p.FingerprintHeaders)
	p.ReplayExcludeHeaders = slices.Clone(p.ReplayExcludeHeaders)
	return p
}
