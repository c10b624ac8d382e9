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

// unrecorded is the ResponseWriter of a request forwarded without a
// capture (no key, fail_open): it removes the route's control header, which
// is meant for the proxy alone, from the response. It is the pooled request
// itself, writing to q.capture.rw, which such a request does not otherwise
// use, so it costs neither an allocation nor a byte more per request.
type unrecorded request

// unrecorded returns the writer for a response forwarded without a
// capture: w, or w behind the control header's removal.
func (q *request) unrecorded(w http.ResponseWriter) http.ResponseWriter {
	if q.route.policy.UpstreamControlHeader == "" {
		return w
	}
	q.capture.rw = w
	return (*unrecorded)(q)
}

func (u *unrecorded) Header() http.Header { return u.capture.rw.Header() }

func (u *unrecorded) Write(p []byte) (int, error) { return u.capture.rw.Write(p) }

func (u *unrecorded) WriteHeader(code int) {
	if code >= 200 {
		takeUpstreamControl(u.capture.rw.Header(), u.route.policy.UpstreamControlHeader)
	}
	u.capture.rw.WriteHeader(code)
}

// Unwrap gives http.ResponseController the underlying writer, for flushes.
func (u *unrecorded) Unwrap() http.ResponseWriter { return u.capture.rw }
