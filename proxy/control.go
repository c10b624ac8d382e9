package proxy

import (
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
	"time"
)

// DefaultUpstreamControlHeader is the response header an upstream uses to
// steer recording (docs/request-handling.md, "Upstream control").
const DefaultUpstreamControlHeader = "Idempotency-Control"

// ExpiresHeader carries, with advertise_expiry, the HTTP-date after which
// a keyed response's key is forgotten.
const ExpiresHeader = "Idempotency-Expires"

// CheckUpstreamControlHeader reports why name cannot be a route's
// upstream_control_header; "" (disabled) is valid.
func CheckUpstreamControlHeader(name string) error {
	if name != "" && !isToken(name) {
		return fmt.Errorf("%q is not a valid header name", name)
	}
	return nil
}

// takeUpstreamControl removes the header name from an upstream response's
// header h and reports whether it carried the token no-store: deliver the
// response, do not record it, release the key so a retry executes again.
// The header is meant for the proxy alone, so it is removed whatever it
// says, and never reaches a client or a record. Tokens are a
// comma-separated list, matched without regard to case, with any
// "=value" or ";parameters" after a token ignored, as Cache-Control
// directives are; unknown tokens are ignored. An empty name disables it.
func takeUpstreamControl(h http.Header, name string) (noStore bool) {
	if name == "" {
		return false
	}
	name = textproto.CanonicalMIMEHeaderKey(name)
	values, ok := h[name]
	if !ok {
		return false
	}
	delete(h, name)
	for _, v := range values {
		for v != "" {
			var tok string
			tok, v, _ = strings.Cut(v, ",")
			if end := strings.IndexAny(tok, "=;"); end >= 0 {
				tok = tok[:end]
			}
			if strings.EqualFold(strings.Trim(tok, " \t"), "no-store") {
				noStore = true
			}
		}
	}
	return noStore
}

// expiresValue is the Idempotency-Expires value of a record created at
// created and kept for ttl. HTTP-dates have whole seconds: the time is
// rounded down, so a retry sent before the advertised date always finds
// the record.
func expiresValue(created time.Time, ttl time.Duration) string {
	return created.Add(ttl).UTC().Truncate(time.Second).Format(http.TimeFormat)
}
