package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
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
	if name != "" && !httpguts.ValidHeaderFieldName(name) {
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
// name is canonical, as a route keeps it (newRoute).
func takeUpstreamControl(h http.Header, name string) (noStore bool) {
	if name == "" {
		return false
	}
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

// unannounceTrailer removes name from the response's Trailer header, so
// that the control header is neither announced to the client nor sent as
// a trailer: net/http's server sends only the trailers announced when the
// header section was written, and those set under http.TrailerPrefix
// (which dropControlTrailers removes). It allocates only when name is
// announced.
func unannounceTrailer(h http.Header, name string) {
	values, ok := h["Trailer"]
	if !ok || name == "" {
		return
	}
	if !httpguts.HeaderValuesContainsToken(values, name) {
		return
	}
	var kept []string
	for _, v := range values {
		for _, tok := range strings.Split(v, ",") {
			if tok = strings.TrimSpace(tok); tok != "" && !strings.EqualFold(tok, name) {
				kept = append(kept, tok)
			}
		}
	}
	if len(kept) == 0 {
		delete(h, "Trailer")
		return
	}
	h["Trailer"] = []string{strings.Join(kept, ", ")}
}

// dropControlTrailers removes the control header name from the trailers
// the reverse proxy left in the response header h once the body was
// copied: announced ones under their own name, others under
// http.TrailerPrefix. Run before the handler returns, when net/http's
// server sends them. name is canonical, as a route keeps it.
func dropControlTrailers(h http.Header, name string) {
	if name == "" {
		return
	}
	delete(h, name)
	for k := range h {
		if len(k) > len(http.TrailerPrefix) && strings.HasPrefix(k, http.TrailerPrefix) &&
			strings.EqualFold(k[len(http.TrailerPrefix):], name) {
			delete(h, k)
		}
	}
}

// finishHeader readies an upstream response's final header section h,
// with status code, for the client: the control header name is neither
// announced as a trailer nor given a sniffed Content-Type the upstream
// did not send. Executed and forwarded responses alike.
func finishHeader(h http.Header, name string, code int) {
	unannounceTrailer(h, name)
	keepContentTypeUnset(h, code)
}

// keepContentTypeUnset stops net/http's server from adding a sniffed
// Content-Type to a response whose upstream sent none: a nil value
// suppresses the header. A client gets the header section the upstream
// sent, executed or replayed alike.
func keepContentTypeUnset(h http.Header, code int) {
	if _, ok := h["Content-Type"]; !ok && bodyAllowed(code) {
		h["Content-Type"] = nil
	}
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
// is meant for the proxy alone, from the response, and keeps net/http from
// adding a Content-Type the upstream did not send. It is the pooled request
// itself, writing to q.capture.rw, which such a request does not otherwise
// use, so it costs neither an allocation nor a byte more per request.
type unrecorded request

// unrecorded returns the writer for a response forwarded without a
// capture.
func (q *request) unrecorded(w http.ResponseWriter) http.ResponseWriter {
	q.capture.rw = w
	return (*unrecorded)(q)
}

func (u *unrecorded) Header() http.Header { return u.capture.rw.Header() }

func (u *unrecorded) Write(p []byte) (int, error) { return u.capture.rw.Write(p) }

func (u *unrecorded) WriteHeader(code int) {
	h := u.capture.rw.Header()
	name := u.route.policy.UpstreamControlHeader
	takeUpstreamControl(h, name)
	if code >= 200 {
		finishHeader(h, name, code)
	} else if code != http.StatusSwitchingProtocols {
		dropHopByHop(h)
	}
	u.capture.rw.WriteHeader(code)
}

// Unwrap gives http.ResponseController the underlying writer, for flushes.
func (u *unrecorded) Unwrap() http.ResponseWriter { return u.capture.rw }
