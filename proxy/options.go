package proxy

import (
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"
)

// Defaults of the upstream options a zero value leaves unset.
const (
	// DefaultUpstreamTimeout is how long a client waits for the
	// upstream's answer.
	DefaultUpstreamTimeout = 60 * time.Second
	// DefaultMaxExecution is how long an upstream call may run in all.
	DefaultMaxExecution = 10 * time.Minute
	// DefaultMaxDetached and DefaultMaxDetachedBytes bound the upstream
	// calls running after their client was let go (detach.go).
	DefaultMaxDetached      = 1000
	DefaultMaxDetachedBytes = 128 << 20
)

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
	// UpstreamTimeout is how long a client waits for the upstream's
	// answer, body included; zero means DefaultUpstreamTimeout. When it
	// passes, the client gets a 504 and the call goes on detached.
	UpstreamTimeout time.Duration
	// MaxExecution bounds an upstream call in all, detached or not; zero
	// means DefaultMaxExecution. At most UpstreamTimeout means no call goes
	// on after its client's timeout: it is cancelled then.
	MaxExecution time.Duration
	// MaxDetached and MaxDetachedBytes bound the calls going on after their
	// client was let go: their count, and the memory they may hold (each
	// counts its request body and its route's max_response_body). Zero
	// means DefaultMaxDetached, DefaultMaxDetachedBytes. A call past either
	// bound is cancelled at UpstreamTimeout instead.
	MaxDetached      int
	MaxDetachedBytes int64
	// AsyncPath is the prefix of the status URLs of requests answered 202
	// under Prefer: respond-async, served by the handler and never
	// forwarded; "" means DefaultAsyncPath.
	AsyncPath string
	// AsyncSecret signs the status URLs. Every replica sharing a store
	// needs the same one, kept across restarts: a status URL is checked
	// against it, not remembered. Empty turns respond-async off.
	AsyncSecret []byte
	// UpstreamProtocol is the HTTP version spoken upstream when Transport
	// is nil; the zero value is HTTP/1.1.
	UpstreamProtocol UpstreamProtocol
	// Transport carries upstream requests; nil means
	// NewTransportFor(UpstreamProtocol).
	Transport http.RoundTripper
	// Store keeps leases and records. Required.
	Store Store
	// Default is the policy of requests that match no route; the zero
	// Policy means DefaultPolicy(). A policy with any field set is used,
	// and checked, as it is.
	Default Policy
	// Routes are matched with ServeMux rules: the most specific pattern wins.
	Routes []Route
	// Logger receives the handler's logs; nil discards them.
	Logger *slog.Logger
	// AccessLog logs one line per request at info level (see accesslog.go)
	// on AccessLogOutput, when Logger is enabled at info; SetAccessLog
	// changes it while the handler runs.
	AccessLog bool
	// AccessLogOutput receives the access lines, one Write a line: the
	// JSON object Logger's JSON handler would write, and a newline. It must
	// be safe for concurrent use and should buffer (internal/logbuf): a
	// line is written on every request. Nil discards them.
	AccessLogOutput io.Writer
	// AccessLogFields are the access line's fields; nil means
	// DefaultAccessFields. SetAccessLogFormat changes them.
	AccessLogFields []AccessField
	// TrustedProxies are the ranges of the peers whose X-Forwarded-For
	// gives the access line's client_addr (clientAddr); none means the
	// peer's address, whatever the header says.
	TrustedProxies []netip.Prefix
	// Instance names this process in the leases it takes (store.Lease),
	// so an operator can tell which proxy holds a key; "" means
	// DefaultInstance.
	Instance string
	// Metrics receives the handler's metrics; nil means a private registry.
	Metrics *Metrics
	// Observe, when set, is called with every answered request (see
	// Observation); tracing annotates the request's span with it.
	Observe func(*http.Request, Observation)
}

// DefaultInstance is the instance name of a process that was given none:
// its host name and process id, "HOST/PID" (docs/operating.md,
// "Instance"). In a container the host name is the container's (a
// Kubernetes pod's name).
var DefaultInstance = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return host + "/" + strconv.Itoa(os.Getpid())
})
