package proxy

import (
	"log/slog"
	"net/http"
	"net/url"
	"time"
)

// Concurrency is what happens to a request whose key is in flight.
type Concurrency uint8

const (
	// Reject answers 409 with Retry-After.
	Reject Concurrency = iota
	// Wait blocks until the first request completes, then replays its
	// response; 409 after Policy.WaitTimeout.
	Wait
)

// Policy is the idempotency policy of one route.
type Policy struct {
	// Header is the canonical name of the idempotency key header.
	Header string
	// Methods are the protected methods; others pass through unchanged.
	Methods []string
	// RequireKey answers 400 to a protected request without a key.
	RequireKey bool
	// TTL is how long a completed response is replayed.
	TTL time.Duration
	// LockTTL is the lease on an in-flight key, renewed while the upstream runs.
	LockTTL time.Duration
	// Concurrent decides what an in-flight duplicate gets.
	Concurrent Concurrency
	// WaitTimeout bounds waiting under Wait.
	WaitTimeout time.Duration
	// FailOpen forwards without protection when the store is unavailable;
	// false answers 503 (fail closed).
	FailOpen bool
	// KeepOnUpstreamError records the proxy's 502 when the upstream failed
	// after the request was sent (at-most-once); false releases the key so a
	// retry executes again (at-least-once).
	KeepOnUpstreamError bool
	// ReleaseStatuses are upstream statuses that mean "not processed": they
	// are delivered but not recorded, and the key is released.
	ReleaseStatuses []int
	// MaxRequestBody is the largest request body accepted, in bytes.
	MaxRequestBody int64
	// MaxResponseBody is the largest response body recorded, in bytes;
	// larger bodies are delivered but recorded without the body.
	MaxResponseBody int64
	// ScopeHeaders namespace keys: the same key under different values of
	// these headers names different operations.
	ScopeHeaders []string
	// FingerprintHeaders join method, path, query and body in the payload fingerprint.
	FingerprintHeaders []string
	// ReplayExcludeHeaders are recorded but not replayed.
	ReplayExcludeHeaders []string
}

// DefaultPolicy returns the built-in defaults of SPEC §3.
func DefaultPolicy() Policy {
	return Policy{
		Header:               "Idempotency-Key",
		Methods:              []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete},
		TTL:                  24 * time.Hour,
		LockTTL:              30 * time.Second,
		Concurrent:           Reject,
		WaitTimeout:          10 * time.Second,
		ReleaseStatuses:      []int{408, 425, 429, 503},
		MaxRequestBody:       10 << 20,
		MaxResponseBody:      1 << 20,
		ScopeHeaders:         []string{"Authorization"},
		FingerprintHeaders:   []string{"Content-Type"},
		ReplayExcludeHeaders: []string{"Date", "Set-Cookie"},
	}
}

// Route applies a policy to the requests matching a ServeMux pattern.
type Route struct {
	// Pattern is a net/http ServeMux pattern ("POST /v1/charges",
	// "/v1/comments/"); it is also the route's metrics label.
	Pattern string
	// Disabled routes are plain pass-through.
	Disabled bool
	Policy   Policy
}

// Options configure a Handler.
type Options struct {
	// Upstream is the base URL requests are forwarded to. Required.
	Upstream *url.URL
	// UpstreamTimeout bounds the whole upstream exchange; zero means 60s.
	UpstreamTimeout time.Duration
	// Transport carries upstream requests; nil means NewTransport().
	Transport http.RoundTripper
	// Store keeps leases and records. Required.
	Store Store
	// Default is the policy of requests that match no route; a zero value
	// means DefaultPolicy().
	Default Policy
	// Routes are matched with ServeMux rules: the most specific pattern wins.
	Routes []Route
	// Logger receives the handler's logs; nil discards them.
	Logger *slog.Logger
	// Metrics receives the handler's metrics; nil means a private registry.
	Metrics *Metrics
	// Observe, when set, is called with every answered request (see
	// Observation); tracing annotates the request's span with it.
	Observe func(*http.Request, Observation)
}
