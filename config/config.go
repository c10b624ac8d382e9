package config

import (
	"errors"
	"log/slog"
	"net/url"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/proxy"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
	"github.com/idempotency-proxy/idempotency-proxy/store/redisstore"
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
//
// The struct is the schema: a field's `config` tag is its key, a nested
// struct is a mapping of keys, and a `flag` tag names the command-line flag
// that sets the key. Decoding, the environment variables, unknown-key
// detection and Keys all follow the tags (see schema.go); docs/configuration.md
// documents every key.
type Config struct {
	// Listen is the proxy listener address, host:port.
	Listen string `config:"listen" flag:"listen"`
	// AdminListen serves /metrics, /healthz and /readyz, host:port.
	AdminListen string `config:"admin_listen" flag:"admin-listen"`
	// LogLevel is the minimum level of the JSON logs on stderr.
	LogLevel slog.Level `config:"log_level" flag:"log-level"`
	// ShutdownTimeout bounds the drain of in-flight requests on SIGTERM/SIGINT.
	ShutdownTimeout time.Duration `config:"shutdown_timeout"`
	Upstream        Upstream      `config:"upstream"`
	Store           Store         `config:"store"`
	Admin           Admin         `config:"admin"`
	Tracing         Tracing       `config:"tracing"`
	// Defaults is the policy of every request no route matches, and the base
	// every route inherits from. It is decoded before Routes, which start
	// from it.
	Defaults Policy `config:"defaults"`
	// Routes hold effective policies: keys a route does not set come from Defaults.
	Routes []Route `config:"routes"`
	// File is the path of the configuration file used, "" when none.
	File string
}

// Upstream is the service the proxy protects.
type Upstream struct {
	// URL is http or https with a host; its path is a prefix for proxied paths.
	URL *url.URL `config:"url" flag:"upstream"`
	// Timeout bounds the whole upstream exchange, body included.
	Timeout time.Duration `config:"timeout"`
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
	Kind   string      `config:"kind"`
	Memory MemoryStore `config:"memory"`
	Redis  RedisStore  `config:"redis"`
}

// kind resolves an empty Kind: setting a Redis address is enough to use
// Redis.
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
	MaxBytes Size `config:"max_bytes"`
	// WhenFull is "reject" (new keys get the store-full answer of
	// on_store_error) or "evict_oldest" (the oldest completed records
	// are dropped; a lease never is).
	WhenFull memory.WhenFull `config:"when_full"`
}

// RedisStore configures the Redis store: URL for one node, Addrs for a
// cluster, or Addrs with MasterName for Sentinel.
type RedisStore struct {
	// URL is redis:// or rediss:// (TLS), credentials and database included.
	URL string `config:"url" flag:"redis-url"`
	// Addrs are host:port seeds of a cluster, or Sentinel addresses.
	Addrs []string `config:"addrs"`
	// MasterName selects Sentinel mode.
	MasterName string `config:"master_name"`
	// KeyPrefix starts every key the proxy writes.
	KeyPrefix string `config:"key_prefix"`
	// Timeout bounds each store operation.
	Timeout time.Duration `config:"timeout"`
}

// Admin configures the operator API on the admin listener.
type Admin struct {
	// Token enables /admin/ and is the bearer token it requires. Prefer
	// setting it through the environment (IDEMPOTENCY_PROXY_ADMIN_TOKEN).
	Token string `config:"token"`
	// TokenFile names a file holding the token instead; it is read again
	// on every reload. Not both.
	TokenFile string `config:"token_file"`
	// PProf serves /debug/pprof/ on the admin listener, behind the token
	// when one is set.
	PProf bool `config:"pprof"`
}

// Tracing configures OpenTelemetry tracing; the exporter itself is
// configured by the standard OTEL_* environment variables.
type Tracing struct {
	// Enabled exports a span per proxied request over OTLP.
	Enabled bool `config:"enabled"`
}

// Policy is the idempotency behaviour of the defaults or of one route. It is
// the handler's own type: its tags are the policy keys, its defaults are
// proxy.DefaultPolicy and its validation is Policy.Check, so a policy key
// is declared, defaulted and checked in one place.
type Policy = proxy.Policy

// Route is a ServeMux pattern with its effective policy.
type Route struct {
	// Match is a Go ServeMux pattern; it is also the metrics route label.
	Match string `config:"match"`
	// Enabled false makes the route a plain pass-through.
	Enabled bool `config:"enabled"`
	Policy
}

// Default returns the built-in defaults. Upstream.URL is nil: it has no
// default and must be configured. Defaults owned by the packages that use
// them (the policy, the upstream timeout, the Redis prefix and timeout) are
// taken from there.
func Default() *Config {
	return &Config{
		Listen:          ":8080",
		AdminListen:     ":9090",
		LogLevel:        slog.LevelInfo,
		ShutdownTimeout: 30 * time.Second,
		Upstream:        Upstream{Timeout: proxy.DefaultUpstreamTimeout},
		Store: Store{
			Memory: MemoryStore{MaxBytes: 256 * MiB},
			Redis: RedisStore{
				Addrs:     []string{},
				KeyPrefix: redisstore.DefaultKeyPrefix,
				Timeout:   redisstore.DefaultTimeout,
			},
		},
		Defaults: proxy.DefaultPolicy(),
		Routes:   []Route{},
	}
}
