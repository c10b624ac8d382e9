package config

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/proxy"
	"github.com/idempotency-proxy/idempotency-proxy/store/filestore"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
	"github.com/idempotency-proxy/idempotency-proxy/store/postgres"
	"github.com/idempotency-proxy/idempotency-proxy/store/redisstore"
	"github.com/idempotency-proxy/idempotency-proxy/store/seal"
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
	// File and Line say where in the configuration file the value is,
	// when it came from there; Line is 0 otherwise.
	File string
	Line int
}

// Error is "path: reason", or "file:line: path: reason" for a value from
// the file, which an editor jumps to. A problem of the file as a whole
// has the file as its path: "file:line: reason".
func (p *Problem) Error() string {
	switch {
	case p.Line == 0:
		return p.Path + ": " + p.Reason
	case p.Path == p.File:
		return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Reason)
	}
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Path, p.Reason)
}

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
	LogLevel LogLevel `config:"log_level" flag:"log-level" reload:"live"`
	// AccessLog logs one line per request at info level (msg "access").
	AccessLog bool `config:"access_log" reload:"live"`
	// AccessLogFields are the fields of the access line, written in the
	// line's own order (docs/operating.md#logs).
	AccessLogFields []proxy.AccessField `config:"access_log_fields" reload:"live"`
	// TrustedProxies are the peers whose X-Forwarded-For gives the access
	// line's client_addr.
	TrustedProxies []CIDR `config:"trusted_proxies" reload:"live"`
	// ShutdownTimeout bounds the drain of in-flight requests on SIGTERM/SIGINT.
	ShutdownTimeout time.Duration `config:"shutdown_timeout" reload:"live"`
	// AsyncPath is the prefix of the status URLs of requests answered 202
	// under Prefer: respond-async (a route's async: allow), served on the
	// proxy listener and never forwarded.
	AsyncPath string `config:"async_path"`
	// AsyncSecret signs status URLs; required when a route sets async:
	// allow, the same on every replica sharing a store. Prefer setting it
	// through the environment (IDEMPOTENCY_PROXY_ASYNC_SECRET).
	AsyncSecret string   `config:"async_secret" secret:"yes"`
	Upstream    Upstream `config:"upstream"`
	Store       Store    `config:"store"`
	Admin       Admin    `config:"admin"`
	Tracing     Tracing  `config:"tracing"`
	// Defaults is the policy of every request no route matches, and the base
	// every route inherits from. It is decoded before Routes, which start
	// from it.
	Defaults Policy `config:"defaults" reload:"live"`
	// Routes hold effective policies: keys a route does not set come from Defaults.
	Routes []Route `config:"routes" reload:"live"`
	// File is the path of the configuration file used, "" when none.
	File string
	// origins are the paths Load's layers set: "" for the file, "from
	// NAME" for a variable or flag (View tells them from defaults).
	origins map[string]string
	// fileEmpty: File holds no key (empty, or every line a comment).
	fileEmpty bool
}

// FileEmpty reports whether the configuration file holds no key: it is
// empty, or every line of it is a comment. A reload refuses such a file
// where the configuration in force came from one that held keys.
func (c *Config) FileEmpty() bool { return c.fileEmpty }

// Upstream is the service the proxy protects.
type Upstream struct {
	// URL is http or https with a host; its path is a prefix for proxied paths.
	URL *url.URL `config:"url" flag:"upstream"`
	// Timeout is how long a client waits for the upstream's answer, body
	// included: then it gets a 504 and the call goes on, detached.
	Timeout time.Duration `config:"timeout"`
	// MaxExecution bounds an upstream call in all, detached or not; at
	// least Timeout. Equal to Timeout, nothing goes on detached.
	MaxExecution time.Duration `config:"max_execution"`
	// MaxDetached and MaxDetachedBytes bound the calls going on after their
	// client was let go: their count, and the memory they may hold.
	MaxDetached      int   `config:"max_detached"`
	MaxDetachedBytes int64 `config:"max_detached_bytes,size"`
	// Protocol is the HTTP version spoken upstream: http1, h2c (HTTP/2
	// without TLS, prior knowledge: a gRPC server) or auto (HTTP/2 over TLS
	// where the upstream offers it).
	Protocol proxy.UpstreamProtocol `config:"protocol"`
}

// Store kinds the code names; every kind is a field of Store.
const (
	StoreMemory   = "memory"
	StoreRedis    = "redis"
	StorePostgres = "postgres"
)

// Store selects and configures where keys, locks and responses are kept.
//
// Every field after Kind is a store kind: its tag is the kind's name and the
// key of its section, and its type is the store package's own Options (a
// store.Options), which declares the section's keys, defaults and checks.
// Adding a kind is adding its field (docs/architecture.md, "Adding a
// store").
type Store struct {
	// Kind names the store in use; Load always sets it. "" (as in Default)
	// means the kind whose address is set (store.redis.url or addrs, ...),
	// else memory; two kinds with an address and no Kind is a problem.
	Kind     string             `config:"kind"`
	Memory   memory.Options     `config:"memory"`
	Redis    redisstore.Options `config:"redis"`
	Postgres postgres.Options   `config:"postgres"`
	File     filestore.Options  `config:"file"`
	// Encryption applies to every kind: it is not one.
	Encryption Encryption `config:"encryption"`
}

// Encryption seals recorded headers and bodies before any store sees them
// (package store/seal).
type Encryption struct {
	// KeysFile names the keys file: one "KEY_ID BASE64KEY" line per key,
	// the first seals new records, every key opens the ones it sealed.
	// Load reads it, so a reload re-reads it; "" turns encryption off.
	KeysFile string `config:"keys_file" reload:"live"`
	// Keyring is the keys file as Load read it, nil when KeysFile is "".
	Keyring *seal.Keyring
}

// load reads the keys file into Keyring; a problem names the file and line.
func (e *Encryption) load(v *validation) {
	e.Keyring = nil
	if e.KeysFile == "" {
		// Set empty by the environment or a flag (a Secret without its
		// key), it is a mistake, not a wish to store responses in clear.
		if v.origins["store.encryption.keys_file"] != "" {
			v.add("store.encryption.keys_file", "empty: name the keys file; encryption off would store new records in clear and leave sealed ones unreadable")
		}
		return
	}
	kr, err := seal.Load(e.KeysFile)
	if err != nil {
		v.add("store.encryption.keys_file", "%s", err)
		return
	}
	e.Keyring = kr
}

// Admin configures the operator API on the admin listener.
type Admin struct {
	// Token enables /admin/ and is the bearer token it requires. Prefer
	// setting it through the environment (IDEMPOTENCY_PROXY_ADMIN_TOKEN).
	Token string `config:"token" reload:"live" secret:"yes"`
	// TokenFile names a file holding the token instead; it is read again
	// on every reload. Not both.
	TokenFile string `config:"token_file" reload:"live"`
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
// them (the policy, the upstream timeout, every store's options) are taken
// from there.
func Default() *Config {
	return &Config{
		Listen:          ":8080",
		AdminListen:     ":9090",
		LogLevel:        LogInfo,
		AccessLog:       true,
		AccessLogFields: proxy.DefaultAccessFields(),
		TrustedProxies:  []CIDR{},
		ShutdownTimeout: 30 * time.Second,
		AsyncPath:       proxy.DefaultAsyncPath,
		Upstream: Upstream{
			Timeout:          proxy.DefaultUpstreamTimeout,
			MaxExecution:     proxy.DefaultMaxExecution,
			MaxDetached:      proxy.DefaultMaxDetached,
			MaxDetachedBytes: proxy.DefaultMaxDetachedBytes,
		},
		Store:    defaultStore(),
		Defaults: proxy.DefaultPolicy(),
		Routes:   []Route{},
	}
}
