package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution"
)

// NewTransport returns the transport the proxy uses upstream: keep-alive
// connections sized for a busy sidecar (Go's default keeps 2 idle
// connections per host, which halves throughput under concurrency), no
// environment proxies and no transparent compression, so bytes pass
// through unchanged.
func NewTransport() *http.Transport {
	return &http.Transport{
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		// Go's default, made explicit: an upstream response whose header
		// section is larger fails after the request was sent. The
		// upstream has answered, so its key is kept with a 502 whatever
		// on_upstream_error says (docs/request-handling.md).
		MaxResponseHeaderBytes: 10 << 20,
		MaxIdleConns:           1024,
		MaxIdleConnsPerHost:    1024,
		IdleConnTimeout:        90 * time.Second,
		ExpectContinueTimeout:  time.Second,
		DisableCompression:     true,
		WriteBufferSize:        32 << 10,
		ReadBufferSize:         32 << 10,
	}
}

func newReverseProxy(upstream *url.URL, transport http.RoundTripper, http2 bool, onError func(http.ResponseWriter, *http.Request, error), log *slog.Logger) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			// A sidecar is transparent: the application sees the Host its
			// clients asked for.
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
			hideIdempotencyKey(pr.Out.Header)
			// The body is already in memory: no reason to wait for a 100.
			delete(pr.Out.Header, "Expect")
			forwardMemoryBody(pr)
			if http2 {
				unrewindable(pr)
			}
		},
		Transport:    transport,
		ErrorHandler: onError,
		BufferPool:   bufferPool{},
		ErrorLog:     slog.NewLogLogger(cutsLoggedApart{log.Handler()}, slog.LevelWarn),
	}
}

// cutsLoggedApart is the handler of the reverse proxy's ErrorLog: its
// lines come out as the proxy's warnings, but for those whose error is the
// Cut of a call's deadline (execution.Call). The reverse proxy logs the
// body copy such a cut breaks ("read error during body copy: upstream call
// cut at upstream.max_execution"); the proxy logs the cut itself, with the
// request's key_hash (cutWhileAnswering): one event, one line. Its other
// lines, a body the upstream broke off among them, are kept.
type cutsLoggedApart struct{ slog.Handler }

func (h cutsLoggedApart) Handle(ctx context.Context, r slog.Record) error {
	for _, cut := range [...]execution.Cut{execution.CutAtWait, execution.CutAtMaxExecution} {
		if strings.HasSuffix(r.Message, cut.Error()) {
			return nil
		}
	}
	return h.Handler.Handle(ctx, r)
}

// hideIdempotencyKey keeps forwarding the key header, under a lower-case
// map key. net/http's Transport treats a request carrying Idempotency-Key or
// X-Idempotency-Key as safe to resend when a reused connection fails after
// the request was written (golang/go#19943); the legacy upstream behind
// this proxy is precisely not idempotent, so it must never resend one.
// Header names are case-insensitive on the wire, and the map key is
// written as-is. Only these two names make the transport resend: a key
// from another header (X-GitHub-Delivery) or from the body needs nothing.
func hideIdempotencyKey(h http.Header) {
	for _, name := range [...][2]string{
		{"Idempotency-Key", "idempotency-key"},
		{"X-Idempotency-Key", "x-idempotency-key"},
	} {
		if v, ok := h[name[0]]; ok {
			delete(h, name[0])
			h[name[1]] = v
		}
	}
}

// unrewindable, called from the reverse proxy's Rewrite when the transport
// may speak HTTP/2 upstream, keeps it from sending a request the proxy read
// whole (a protected one) a second time. Go's HTTP/2 transport resends a
// request whose stream was reset with PROTOCOL_ERROR — after the upstream
// may have acted on it (golang/go#47635) — or refused, or left out by a
// GOAWAY, whatever its method, when it can rewind the body (GetBody) or
// the body is empty (nil or http.NoBody). So the outgoing request has no
// GetBody, and an empty body is a reader of its own: the transport answers
// such a reset with an error instead, and the proxy with a 502. Over
// HTTP/1.1 GetBody stays: that transport resends a POST only when nothing
// of it reached the connection.
func unrewindable(pr *httputil.ProxyRequest) {
	if _, ok := pr.In.Body.(*memoryBody); !ok {
		return
	}
	pr.Out.GetBody = nil
	if pr.Out.Body == nil || pr.Out.Body == http.NoBody {
		pr.Out.Body = new(memoryBody)
	}
}

// speaksHTTP2 reports whether the transport may speak HTTP/2 upstream:
// upstream.protocol says so, or a transport given as it is was set up for
// it.
func speaksHTTP2(p UpstreamProtocol, transport http.RoundTripper) bool {
	if p != UpstreamHTTP1 {
		return true
	}
	t, ok := transport.(*http.Transport)
	if !ok {
		return false
	}
	return t.ForceAttemptHTTP2 || t.Protocols != nil && (t.Protocols.HTTP2() || t.Protocols.UnencryptedHTTP2())
}

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// bufferPool recycles the reverse proxy's copy buffers.
type bufferPool struct{}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *copyBuffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { copyBuffers.Put(&b) }
