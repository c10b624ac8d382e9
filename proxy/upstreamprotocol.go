package proxy

import (
	"net/http"

	"github.com/idempotency-proxy/idempotency-proxy/internal/enum"
)

// UpstreamProtocol is the HTTP version the proxy speaks to its upstream
// (upstream.protocol). Whatever it is, the listener takes HTTP/1.1 and
// HTTP/2 without TLS (h2c, prior knowledge) alike: a client's protocol and
// the upstream's are independent.
type UpstreamProtocol uint8

const (
	// UpstreamHTTP1 speaks HTTP/1.1, over TLS for an https upstream.
	UpstreamHTTP1 UpstreamProtocol = iota
	// UpstreamH2C speaks HTTP/2 without TLS to an http upstream, with
	// prior knowledge (no Upgrade), as gRPC servers expect; HTTP/2 over
	// TLS to an https one.
	UpstreamH2C
	// UpstreamAuto speaks HTTP/2 over TLS when an https upstream offers it
	// (ALPN), else HTTP/1.1; HTTP/1.1 to an http upstream.
	UpstreamAuto
)

var upstreamProtocolWords = enum.Words{"http1", "h2c", "auto"}

func (p UpstreamProtocol) String() string               { return upstreamProtocolWords.Name(int(p)) }
func (p UpstreamProtocol) MarshalText() ([]byte, error) { return []byte(p.String()), nil }
func (p *UpstreamProtocol) UnmarshalText(b []byte) error {
	return parseWord(p, upstreamProtocolWords, b)
}

// protocols is what an http.Transport speaks for p (Go ≥ 1.24's
// Transport.Protocols; golang/go#67814). nil for HTTP/1.1: NewTransport's
// own, as before the choice existed (a transport with its own dialer does
// not attempt HTTP/2).
func (p UpstreamProtocol) protocols() *http.Protocols {
	var ps http.Protocols
	switch p {
	case UpstreamH2C:
		ps.SetUnencryptedHTTP2(true)
		ps.SetHTTP2(true)
	case UpstreamAuto:
		ps.SetHTTP1(true)
		ps.SetHTTP2(true)
	default:
		return nil
	}
	return &ps
}

// NewTransportFor returns NewTransport speaking p upstream.
func NewTransportFor(p UpstreamProtocol) *http.Transport {
	t := NewTransport()
	t.Protocols = p.protocols()
	return t
}
