package proxy

import (
	"log/slog"
	"net/http"
	"net/url"
	"time"
)

// DefaultUpstreamTimeout bounds the whole upstream exchange when
// Options.UpstreamTimeout is zero.
const DefaultUpstreamTimeout = 60 * time.Second

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
	// UpstreamTimeout bounds the whole upstream exchange; zero means
	// DefaultUpstreamTimeout.
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
