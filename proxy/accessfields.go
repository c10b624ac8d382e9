package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/idempotency-proxy/idempotency-proxy/internal/enum"
)

// AccessField is a field of the access line, as access_log_fields names
// it. Its value is its place in the line: the line writes the fields
// chosen in this order, whatever the order they were chosen in.
type AccessField uint8

// The access line's fields, in the order the line has them. time, level
// and msg start every line and are not chosen.
const (
	FieldMethod AccessField = iota
	FieldPath
	FieldRoute
	FieldStatus
	FieldOutcome
	FieldDuration
	FieldBytes
	FieldKeyHash
	FieldReconcileProbes
	FieldUpstream
	FieldClientAddr
	FieldUserAgent
	FieldRequestID
	FieldProtocol
)

var accessFieldWords = enum.Words{"method", "path", "route", "status", "outcome", "duration_seconds", "bytes",
	"key_hash", "reconcile_probes", "upstream_seconds", "client_addr", "user_agent", "request_id", "protocol"}

func (f AccessField) String() string               { return accessFieldWords.Name(int(f)) }
func (f AccessField) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// UnmarshalText reads a field's name; an unknown one is an error that
// names the fields and the closest one.
func (f *AccessField) UnmarshalText(b []byte) error {
	i, err := accessFieldWords.Parse(string(b))
	if err != nil {
		return err
	}
	*f = AccessField(i)
	return nil
}

// DefaultAccessFields are the fields of the access line when none are
// chosen: those it had before fields could be chosen. The others carry
// what identifies a client (its address, a header) and are written only
// when an operator asks for them.
func DefaultAccessFields() []AccessField {
	return []AccessField{FieldMethod, FieldPath, FieldRoute, FieldStatus, FieldOutcome, FieldDuration,
		FieldBytes, FieldKeyHash, FieldReconcileProbes}
}

// accessSet is a set of fields, resolved once from the configured list:
// the line tests a bit per field.
type accessSet uint32

func (s accessSet) has(f AccessField) bool { return s&(1<<f) != 0 }

// accessFormat is what the access line is written with: its fields and
// the proxies whose X-Forwarded-For is believed.
type accessFormat struct {
	fields  accessSet
	trusted []netip.Prefix
}

func newAccessFormat(fields []AccessField, trusted []netip.Prefix) (*accessFormat, error) {
	if fields == nil {
		fields = DefaultAccessFields()
	}
	f := &accessFormat{trusted: trusted}
	for _, field := range fields {
		if err := accessFieldWords.Check(int(field)); err != nil {
			return nil, fmt.Errorf("proxy: access log field: %w", err)
		}
		f.fields |= 1 << field
	}
	for _, p := range trusted {
		if !p.IsValid() {
			return nil, errors.New("proxy: a trusted proxy range is not a valid CIDR")
		}
	}
	return f, nil
}

// SetAccessLogFormat sets the access line's fields (nil: the defaults)
// and the trusted proxies for requests that start from now on (a reload
// of access_log_fields or trusted_proxies).
func (h *Handler) SetAccessLogFormat(fields []AccessField, trusted []netip.Prefix) error {
	f, err := newAccessFormat(fields, trusted)
	if err != nil {
		return err
	}
	h.accessFormat.Store(f)
	return nil
}

// maxRequestID bounds the request id an access line repeats: a client
// cannot make the line as long as its header.
const maxRequestID = 128

// requestID is the request's X-Request-Id, cut to maxRequestID bytes (at
// a character's start), or "" without one.
func requestID(r *http.Request) string {
	v := r.Header["X-Request-Id"]
	if len(v) == 0 {
		return ""
	}
	id := v[0]
	if len(id) > maxRequestID {
		n := maxRequestID
		for n > 0 && id[n]&0xC0 == 0x80 {
			n-- // a continuation byte: the character starts before it
		}
		id = id[:n]
	}
	return id
}

// userAgent is the request's User-Agent, "" without one.
func userAgent(r *http.Request) string {
	if v := r.Header["User-Agent"]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// clientAddr is the address of the request's client: the peer's, unless
// the peer is a trusted proxy. Then X-Forwarded-For is read from the
// right, each proxy appending the address it got the request from, and
// the client is the first address not in a trusted range: an entry left
// of it may be anything the client wrote. With every entry trusted, it is
// the leftmost; at an entry that is no address, the last trusted one
// (nginx's real_ip_recursive reads the header the same way). The peer's
// own X-Forwarded-For is never read unless the peer is trusted.
func clientAddr(r *http.Request, trusted []netip.Prefix) string {
	peer := remoteHost(r.RemoteAddr)
	if len(trusted) == 0 {
		return peer
	}
	addr, err := netip.ParseAddr(peer)
	if err != nil || !inRanges(addr, trusted) {
		return peer
	}
	client := peer
	xff := r.Header["X-Forwarded-For"]
	for i := len(xff) - 1; i >= 0; i-- {
		rest := xff[i]
		for rest != "" {
			var hop string
			if j := strings.LastIndexByte(rest, ','); j >= 0 {
				hop, rest = rest[j+1:], rest[:j]
			} else {
				hop, rest = rest, ""
			}
			hop = strings.TrimSpace(hop)
			if hop == "" {
				continue
			}
			addr, err := netip.ParseAddr(hop)
			if err != nil {
				return client
			}
			client = hop
			if !inRanges(addr, trusted) {
				return client
			}
		}
	}
	return client
}

// remoteHost is the host of a RemoteAddr "host:port" ("[::1]:80" gives
// "::1"), or all of it when it has no port.
func remoteHost(addr string) string {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 || strings.IndexByte(addr, ':') != i && !strings.HasPrefix(addr, "[") {
		return addr // no port, or an IPv6 address without one
	}
	return strings.TrimSuffix(strings.TrimPrefix(addr[:i], "["), "]")
}

func inRanges(a netip.Addr, ranges []netip.Prefix) bool {
	a = a.Unmap() // ::ffff:10.0.0.1 is 10.0.0.1
	for _, p := range ranges {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
