package proxy

import (
	"net/http"
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// isUpgrade reports whether r is a real protocol upgrade (a WebSocket
// handshake): a GET whose Connection lists "upgrade" and that names the
// protocol in Upgrade. It hands the connection over, so there is no
// response to record and it passes through unprotected. Anything else
// carrying Upgrade — curl --http2 adds "Upgrade: h2c" to a POST, a client
// may send a bare "Upgrade:" — is an ordinary request and must not dodge
// the key rules.
func isUpgrade(r *http.Request) bool {
	if r.Method != http.MethodGet || !httpguts.HeaderValuesContainsToken(r.Header["Connection"], "upgrade") {
		return false
	}
	for _, v := range r.Header["Upgrade"] {
		if textproto.TrimString(v) != "" {
			return true
		}
	}
	return false
}

// dropUpgrade removes an upgrade offer from a request the proxy protects:
// Upgrade and HTTP2-Settings, and their Connection tokens. The upstream
// then answers it as the ordinary request it is, once.
func dropUpgrade(h http.Header) {
	_, up := h["Upgrade"]
	_, settings := h["Http2-Settings"]
	conn := h["Connection"]
	if !up && !settings && !httpguts.HeaderValuesContainsToken(conn, "upgrade") && !httpguts.HeaderValuesContainsToken(conn, "http2-settings") {
		return
	}
	delete(h, "Upgrade")
	delete(h, "Http2-Settings")
	removeTokens(h, "upgrade", "http2-settings")
}

// keepKeyHeader removes the key header's name from Connection. The reverse
// proxy drops every header that Connection names, and the key header is
// forwarded upstream unchanged (docs/request-handling.md), so upstreams
// that deduplicate too can rely on it.
func keepKeyHeader(h http.Header, name string) {
	if httpguts.HeaderValuesContainsToken(h["Connection"], name) {
		removeTokens(h, name)
	}
}

// keepKeyHeaders keeps the header of every header and cookie source: any
// of them may carry the key of a later retry, which the upstream may
// deduplicate on.
func keepKeyHeaders(h http.Header, sources []KeySource) {
	if _, ok := h["Connection"]; !ok {
		return
	}
	for _, k := range sources {
		if name := k.forwarded(); name != "" {
			keepKeyHeader(h, name)
		}
	}
}

// removeTokens rewrites Connection without drop's tokens, deleting it when
// none is left.
func removeTokens(h http.Header, drop ...string) {
	var kept []string
	for _, v := range h["Connection"] {
		for v != "" {
			var t string
			t, v, _ = strings.Cut(v, ",")
			if t = textproto.TrimString(t); t != "" && !containsFold(drop, t) {
				kept = append(kept, t)
			}
		}
	}
	if len(kept) == 0 {
		delete(h, "Connection")
		return
	}
	h["Connection"] = []string{strings.Join(kept, ", ")}
}

func containsFold(list []string, s string) bool {
	for _, l := range list {
		if strings.EqualFold(l, s) {
			return true
		}
	}
	return false
}

// hopHeaders are the fields that belong to one connection whether or not
// Connection names them (RFC 9110 section 7.6.1), as the reverse proxy
// lists them.
var hopHeaders = [...]string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// hopField reports whether the field name of header h belongs to one
// connection: h's Connection names it, or it is one of hopHeaders. The
// reverse proxy forwards no such field, in a request or a response; what
// the proxy sends or records itself drops them the same way.
func hopField(h http.Header, name string) bool {
	for _, k := range hopHeaders {
		if k == name {
			return true
		}
	}
	return httpguts.HeaderValuesContainsToken(h["Connection"], name)
}

// dropHopByHop removes from an interim (1xx) response's header h the
// fields of the upstream's connection: those its Connection field names,
// and hopHeaders. The reverse proxy removes them from the final response
// but forwards a 1xx's as they came (golang/go#81320).
func dropHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				delete(h, textproto.CanonicalMIMEHeaderKey(name))
			}
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
}
