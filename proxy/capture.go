package proxy

import (
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// capture is the ResponseWriter the first request of a key is served
// through. It streams every byte to the client as it arrives and keeps a
// copy, up to a limit, to record. A client that goes away does not stop it:
// writes keep succeeding so the reverse proxy reads the upstream response to
// the end and the retry can be replayed (docs/guarantees.md).
type capture struct {
	rw http.ResponseWriter
	// limit is max_response_body: the most the record may hold, headers
	// and body together. bodyLimit is what the headers leave of it.
	limit, bodyLimit int64
	route            *route
	keyHash          string // for the error handler's log line
	// head is set for a HEAD request, whose response announces the length
	// a GET would send and carries no body.
	head bool

	// responseStarted is set once the response's status went to the
	// client (or would have, had it stayed).
	responseStarted bool
	// answered is when the response's status arrived. It is the record's
	// creation, so that a replay advertises the Idempotency-Expires the
	// executed response did, however long the body took to arrive.
	answered   time.Time
	status     int
	header     http.Header
	body       []byte
	omitted    bool
	recording  bool
	noStore    bool // the upstream said no-store (upstream_control_header)
	clientGone bool
	written    int64

	// declared is the upstream's Content-Length, -1 when it sent none.
	declared int64

	// upstreamErr is the upstream exchange's failure, told by the reverse
	// proxy's error handler (upstreamFailed).
	upstreamErr error
	// sent is set, from the transport's goroutine, once the request's
	// headers were written to an upstream connection: from then on the
	// upstream may have acted on it. Until then a failure (a dial error, a
	// timeout or an abort while connecting) left the upstream untouched.
	sent atomic.Bool
}

var _ http.ResponseWriter = (*capture)(nil)

func (c *capture) Header() http.Header { return c.rw.Header() }

func (c *capture) WriteHeader(code int) {
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		// Informational responses go to the client and are never
		// recorded; the control header is for the proxy alone in them too.
		takeUpstreamControl(c.rw.Header(), c.route.policy.UpstreamControlHeader)
		if !c.clientGone {
			c.rw.WriteHeader(code)
		}
		return
	}
	if c.responseStarted {
		return
	}
	c.responseStarted = true
	c.answered = time.Now()
	c.status = code
	h := c.rw.Header()
	pol := &c.route.policy
	// The control header is for the proxy alone: taken out before the
	// record is copied and before the client sees the header.
	c.noStore = takeUpstreamControl(h, pol.UpstreamControlHeader)
	c.recording = !c.route.releases(code) && !c.noStore
	c.declared = -1
	if n, err := strconv.ParseInt(h.Get("Content-Length"), 10, 64); err == nil {
		c.declared = n
	}
	if c.recording {
		c.header = recordableHeader(h)
		c.bodyLimit = c.limit - headerSize(c.header)
		if c.bodyLimit < 0 {
			// The headers alone are over the limit: keep what a client
			// needs to read the answer, the status and Content-Type.
			c.header = contentTypeOnly(c.header)
			c.omitted, c.bodyLimit = true, 0
		}
		if n := c.declared; n >= 0 && !c.omitted {
			if n > c.bodyLimit {
				c.omitted = true
			} else if n > 0 {
				c.body = make([]byte, 0, n)
			}
		}
	}
	unannounceTrailer(h, pol.UpstreamControlHeader)
	keepContentTypeUnset(h, code)
	// Not recorded, so no expiry to advertise; nor on the proxy's own
	// problem responses (upstreamErr is set before they are written).
	if pol.AdvertiseExpiry && c.recording && c.upstreamErr == nil {
		// The store counts ttl from when the record is written, later
		// than this: a retry before the date always finds the record.
		h[ExpiresHeader] = []string{expiresValue(c.answered, pol.TTL)}
	}
	if !c.clientGone {
		c.rw.WriteHeader(code)
	}
}

func (c *capture) Write(p []byte) (int, error) {
	if !c.responseStarted {
		c.WriteHeader(http.StatusOK)
	}
	c.written += int64(len(p))
	if c.recording && !c.omitted {
		if int64(len(c.body)+len(p)) > c.bodyLimit {
			c.omitted, c.body = true, nil
		} else {
			c.body = append(c.body, p...)
		}
	}
	if !c.clientGone {
		if _, err := c.rw.Write(p); err != nil {
			c.clientGone = true
		}
	}
	return len(p), nil
}

// FlushError lets http.ResponseController flush through the capture; a
// client that is gone is not an error here (see the type comment).
func (c *capture) FlushError() error {
	if c.clientGone {
		return nil
	}
	var err error
	switch f := c.rw.(type) {
	case interface{ FlushError() error }:
		err = f.FlushError()
	case http.Flusher:
		f.Flush()
	}
	if err != nil {
		c.clientGone = true
	}
	return nil
}

// Unwrap gives http.ResponseController the underlying writer for deadlines.
func (c *capture) Unwrap() http.ResponseWriter { return c.rw }

// recordableHeader copies the response header fields worth replaying. The
// reverse proxy has already removed hop-by-hop fields; Content-Length is
// set again on replay, and trailers are not recorded.
func recordableHeader(h http.Header) http.Header {
	out := make(http.Header, len(h))
	n := 0
	for _, v := range h {
		n += len(v)
	}
	values := make([]string, n)
	for k, v := range h {
		if k == "Content-Length" || k == "Trailer" || strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		n := copy(values, v)
		out[k], values = values[:n:n], values[n:]
	}
	return out
}

// headerSize is what a header counts toward max_response_body: its size
// on the wire, "Name: value\r\n" per value.
func headerSize(h http.Header) int64 {
	var n int64
	for k, v := range h {
		for _, s := range v {
			n += int64(len(k) + len(s) + 4)
		}
	}
	return n
}

func contentTypeOnly(h http.Header) http.Header {
	if ct, ok := h["Content-Type"]; ok {
		return http.Header{"Content-Type": ct}
	}
	return http.Header{}
}

// requestSent is the trace hook that notes the request's headers were
// written upstream.
func (c *capture) requestSent() { c.sent.Store(true) }

func (c *capture) upstreamFailed(err error) (sent bool, keyHash string) {
	c.upstreamErr = err
	return c.sent.Load(), c.keyHash
}

// cutShort reports whether fewer body bytes arrived than the upstream
// declared. Under net/http's server the reverse proxy panics on a broken
// body copy; this catches the same failure where it cannot.
func (c *capture) cutShort(method string) bool {
	return c.declared >= 0 && c.written != c.declared && method != http.MethodHead && bodyAllowed(c.status)
}

// trace reports to the capture when the request starts reaching the upstream.
func (c *capture) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{WroteHeaders: c.requestSent}
}

// recordOr records the proxy's own problem response the client was sent
// through the capture, or, when it was not captured, p with detail.
func (c *capture) recordOr(fp store.Fingerprint, p problem, detail string) *store.Record {
	if c.recording && !c.omitted && c.responseStarted {
		return c.record(fp)
	}
	return problemRecord(p, detail, fp)
}

// record returns the captured response as a store record. Its header
// carries the Content-Length a replay sends (0 for an omitted body), so a
// replay does not format it again.
func (c *capture) record(fp store.Fingerprint) *store.Record {
	switch {
	case !bodyAllowed(c.status):
	case c.head:
		// The announced length is the answer to a HEAD: keep it as sent.
		delete(c.header, "Content-Length")
		if c.declared >= 0 {
			c.header["Content-Length"] = []string{strconv.FormatInt(c.declared, 10)}
		}
	default:
		c.header["Content-Length"] = []string{strconv.Itoa(len(c.body))}
	}
	return &store.Record{
		Status:      c.status,
		Header:      c.header,
		Body:        c.body,
		BodyOmitted: c.omitted,
		Fingerprint: fp,
		CreatedAt:   c.answered,
	}
}
