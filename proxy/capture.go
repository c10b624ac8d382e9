package proxy

import (
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idempotency-proxy/idempotency-proxy/internal/grpcwire"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// capture is the ResponseWriter the first request of a key is served
// through. It streams every byte to the client as it arrives and keeps a
// copy, up to a limit, to record. A client that goes away, or is let go
// when upstream.timeout passes (detach), does not stop it: writes keep
// succeeding so the reverse proxy reads the upstream response to the end
// and the retry can be replayed (docs/guarantees.md).
//
// The upstream call writes to it from its own goroutine while the
// handler's goroutine may detach the client: mu guards rw from then on.
// The reverse proxy fills hdr, never rw's header, so that the handler can
// answer the client itself (a 504) while the call goes on.
type capture struct {
	rw  http.ResponseWriter
	hdr http.Header

	mu sync.Mutex
	// detached is set when the client was let go: rw is not written again.
	detached bool
	// withheld is set when the response is an unknown outcome a lookup
	// settles (reconcile.go): the client gets the settled answer instead.
	withheld bool
	// ambiguous is set for a status in ambiguous_statuses, not recorded.
	ambiguous bool
	// ended is set when the upstream call returned: too late to detach.
	ended bool
	// wroteClient is the status that went to the client, 0 until it did.
	wroteClient int
	// flushed is set once the reverse proxy flushed. It adds fields to hdr
	// after the status only for trailers, and flushes before it does
	// (httputil.ReverseProxy forces chunking so): until then hdr is as
	// the status left it, and the client's header holds all of it.
	flushed bool
	// stop says why the call's context was cancelled, if it was (a
	// stopCause); aborted is the handler's, set by a shutdown out of time.
	stop    atomic.Uint32
	aborted *atomic.Bool

	// limit is max_response_body: the most the record may hold, headers
	// and body together. bodyLimit is what the headers leave of it.
	limit, bodyLimit int64
	// policy is the route's: what it releases, what it withholds and
	// the control header it takes out. reconciles is set when the route
	// settles an unknown outcome with a lookup (reconcile.go). The capture
	// knows no more of the route than these.
	policy     *Policy
	reconciles bool
	keyHash    string // for the error handler's log line
	// head is set for a HEAD request, whose response announces the length
	// a GET would send and carries no body.
	head bool

	// responseStarted is set once the response's status went to the
	// client (or would have, had it stayed).
	responseStarted bool
	// answered is when the response's status arrived. It is the record's
	// creation, so that a replay advertises the Idempotency-Expires the
	// executed response did, however long the body took to arrive.
	answered time.Time
	status   int
	// bodiless is set for a status that carries no body (1xx, 204, 304).
	bodiless bool
	// header is what the record keeps of the response's header, built in
	// recHeader when it is that (freeHeader).
	header    http.Header
	recHeader *recordHeader
	body      []byte
	omitted   bool
	// messages counts a gRPC answer's messages (grpc is set for a gRPC
	// call), recorded or not.
	grpc       bool
	messages   grpcwire.Counter
	recording  bool
	noStore    bool // the upstream said no-store (upstream_control_header)
	clientGone bool // a write to the client failed
	written    int64

	// declared is the upstream's Content-Length, -1 when it sent none;
	// sentLength is the field as it came.
	declared   int64
	sentLength []string

	// upstreamErr is the upstream exchange's failure, told by the reverse
	// proxy's error handler (upstreamFailed).
	upstreamErr error
	// hooks is the upstream call's trace, which tells the capture when the
	// request starts reaching the upstream (set in startCapture), and rec
	// the record of its response (record): parts of the capture, not
	// allocations of their own.
	hooks httptrace.ClientTrace
	rec   store.Record

	// sent is set, from the transport's goroutine, once the request's
	// headers were written to an upstream connection: from then on the
	// upstream may have acted on it. Until then a failure (a dial error, a
	// timeout or an abort while connecting) left the upstream untouched.
	sent atomic.Bool
}

var _ http.ResponseWriter = (*capture)(nil)

func (c *capture) Header() http.Header { return c.hdr }

// begun reports whether the answer's status went to the client.
func (c *capture) begun() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wroteClient != 0
}

// toClient reports whether the client still gets what the upstream sends.
// c.mu must be held.
func (c *capture) toClient() bool { return !c.detached && !c.clientGone && !c.withheld }

// copyHeader sets every field of c.hdr on the client's header. c.mu must
// be held.
func (c *capture) copyHeader() http.Header {
	out := c.rw.Header()
	for k, v := range c.hdr {
		out[k] = v
	}
	return out
}

func (c *capture) WriteHeader(code int) {
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		// Informational responses go to the client and are never
		// recorded; the control header is for the proxy alone in them too.
		// The server does not clear the fields of a 1xx: they are taken
		// out again, as the reverse proxy clears hdr.
		takeUpstreamControl(c.hdr, c.policy.UpstreamControlHeader)
		dropHopByHop(c.hdr)
		c.mu.Lock()
		if c.toClient() {
			out := c.copyHeader()
			c.rw.WriteHeader(code)
			for k := range c.hdr {
				delete(out, k)
			}
		}
		c.mu.Unlock()
		return
	}
	if c.responseStarted {
		return
	}
	c.responseStarted = true
	c.answered = time.Now()
	c.status = code
	h := c.hdr
	pol := c.policy
	// The control header is for the proxy alone: taken out before the
	// record is copied and before the client sees the header.
	c.noStore = takeUpstreamControl(h, pol.UpstreamControlHeader)
	c.judge(code)
	c.declared, c.sentLength = -1, h["Content-Length"]
	if len(c.sentLength) > 0 {
		if n, err := strconv.ParseInt(c.sentLength[0], 10, 64); err == nil {
			c.declared = n
		}
	}
	if c.recording {
		var size int64
		c.header, size = c.recordableHeader(h)
		c.bodyLimit = c.limit - size
		if c.bodyLimit < 0 {
			// The headers alone are over the limit: keep what a client
			// needs to read the answer, the status and Content-Type, and
			// a trailers-only gRPC answer's grpc-status.
			all := c.header
			c.header = contentTypeOnly(all)
			if c.grpc {
				withGRPCStatus(c.header, all)
			}
			c.omitted, c.bodyLimit = true, 0
		}
		// A HEAD, 204 or 304 response announces a length it does not
		// carry: nothing of it is left out, however large.
		if n := c.declared; n >= 0 && !c.omitted && !c.head && !c.bodiless {
			if n > c.bodyLimit {
				c.omitted = true
			} else if n > 0 {
				c.body = make([]byte, 0, n)
			}
		}
	}
	finishHeader(h, pol.UpstreamControlHeader, code)
	// Not recorded, so no expiry to advertise; nor on the proxy's own
	// problem responses (upstreamErr is set before they are written).
	// A shadow route adds no header.
	if pol.AdvertiseExpiry && pol.Mode == ModeEnforce && c.recording && c.upstreamErr == nil {
		// The store counts ttl from when the record is written, later
		// than this: a retry before the date always finds the record.
		h[ExpiresHeader] = []string{expiresValue(c.answered, pol.ttlFor(code))}
	}
	c.mu.Lock()
	if c.toClient() {
		c.copyHeader()
		c.rw.WriteHeader(code)
		c.wroteClient = code
	}
	c.mu.Unlock()
}

// judge decides, in the one place that does, what a final answer with
// status code means for its key under the route's policy: released when
// code is one of release_statuses ("not processed, try again") or the
// upstream said no-store; ambiguous when it is one of ambiguous_statuses
// and the upstream sent it, an answer that says nothing of the outcome and
// is not the key's (withheld from the client on a reconciling route, which
// gets the settled answer instead); else recorded. It notes too whether
// the status carries a body at all.
func (c *capture) judge(code int) {
	pol := c.policy
	c.bodiless = !bodyAllowed(code)
	c.recording = !slices.Contains(pol.ReleaseStatuses, code) && !c.noStore
	if slices.Contains(pol.AmbiguousStatuses, code) && c.upstreamErr == nil {
		c.recording, c.ambiguous = false, true
		c.mu.Lock()
		c.withheld = c.reconciles
		c.mu.Unlock()
	}
}

func (c *capture) Write(p []byte) (int, error) {
	if !c.responseStarted {
		c.WriteHeader(http.StatusOK)
	}
	c.written += int64(len(p))
	if c.grpc {
		c.messages.Write(p)
	}
	if c.recording && !c.omitted {
		if int64(len(c.body)+len(p)) > c.bodyLimit {
			c.omitted, c.body = true, nil
		} else {
			c.body = append(c.body, p...)
		}
	}
	c.mu.Lock()
	if c.toClient() {
		if _, err := c.rw.Write(p); err != nil {
			c.clientGone = true
		}
	}
	c.mu.Unlock()
	return len(p), nil
}

// FlushError lets http.ResponseController flush through the capture; a
// client that is gone is not an error here (see the type comment).
func (c *capture) FlushError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flushed = true
	if !c.toClient() {
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

// detach lets the client go while the upstream call goes on (counted in
// gauge until it ends), and reports
// whether it did (not when the call has already returned) and the status
// the client had been sent, 0 if none.
func (c *capture) detach(gauge prometheus.Gauge) (ok bool, status int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return false, 0
	}
	gauge.Inc()
	c.detached = true
	return true, c.wroteClient
}

// end notes that the upstream call returned and reports whether the client
// had been let go. Fields the reverse proxy set after the status (trailers)
// reach the client's header here, without the control header's.
func (c *capture) end(gauge prometheus.Gauge) (detached bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	if c.flushed {
		dropControlTrailers(c.hdr, c.policy.UpstreamControlHeader)
		if c.toClient() && c.wroteClient != 0 {
			c.copyHeader()
		}
	}
	if c.detached {
		gauge.Dec()
	}
	return c.detached
}

// recordHeader is a record's header map and the slice its values lie in.
// Stores encode a record in Complete and keep none of it, so once the key
// is settled they are used again: a map, its table and a slice less for
// every executed request.
type recordHeader struct {
	h      http.Header
	values []string
}

var recordHeaders = sync.Pool{New: func() any { return &recordHeader{h: make(http.Header)} }}

// recordableHeader copies the response header fields worth replaying, and
// returns what they count toward max_response_body: their size on the wire,
// "Name: value\r\n" per value. The reverse proxy has already removed
// hop-by-hop fields; Content-Length is set again on replay, and trailers
// are recorded apart (trailers).
func (c *capture) recordableHeader(h http.Header) (http.Header, int64) {
	rh := recordHeaders.Get().(*recordHeader)
	c.recHeader = rh
	n := 0
	for _, v := range h {
		n += len(v)
	}
	if cap(rh.values) < n {
		rh.values = make([]string, n)
	}
	out, values := rh.h, rh.values[:n]
	var size int64
	for k, v := range h {
		if k == "Content-Length" || k == "Trailer" || strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		n := copy(values, v)
		out[k], values = values[:n:n], values[n:]
		for _, s := range v {
			size += int64(len(k) + len(s) + 4)
		}
	}
	return out, size
}

// freeHeader gives the record's header back to its pool, unless one
// response's fields grew it too large to keep.
func (c *capture) freeHeader() {
	rh := c.recHeader
	if rh == nil {
		return
	}
	c.recHeader, c.header = nil, nil
	if len(rh.h) > 64 || cap(rh.values) > 256 {
		return
	}
	clear(rh.h)
	clear(rh.values[:cap(rh.values)])
	recordHeaders.Put(rh)
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

func (c *capture) upstreamFailed(err error) (f failure, sent bool, keyHash string) {
	c.upstreamErr = err
	sent = c.sent.Load()
	f = upstreamFailure(err, sent, c.stopCause())
	if c.reconciles && (f == failUpstream || f == failUpstreamTimeout || f == failMaxExecution) {
		c.mu.Lock() // the lookup's answer goes to the client instead of this 502
		c.withheld = true
		c.mu.Unlock()
	}
	return f, sent, c.keyHash
}

// verdict is what the capture tells of the upstream call once it
// returned, all that conclude asks of it besides the record: how the
// exchange failed (0 when the upstream answered), and whether the answer
// was lost (aborted: the reverse proxy panicked; or no status came) or cut
// short (cutShort). An answer that came whole with a status to record is
// built into one (record) only once conclude decides to keep it.
func (c *capture) verdict(aborted bool) (f failure, lost bool) {
	if c.upstreamErr != nil {
		f = upstreamFailure(c.upstreamErr, c.sent.Load(), c.stopCause())
	} else if c.stopCause() == stopShutdown {
		f = failShuttingDown
	}
	return f, aborted || !c.responseStarted || c.cutShort()
}

// stopCause is why the call's context was cancelled: a shutdown out of
// time first, whatever else was under way.
func (c *capture) stopCause() stopCause {
	if c.aborted != nil && c.aborted.Load() {
		return stopShutdown
	}
	return stopCause(c.stop.Load())
}

// cutShort reports whether fewer body bytes arrived than the upstream
// declared. Under net/http's server the reverse proxy panics on a broken
// body copy; this catches the same failure where it cannot.
func (c *capture) cutShort() bool {
	return c.declared >= 0 && c.written != c.declared && !c.head && !c.bodiless
}

// record returns the captured response as a store record. Its header
// carries the Content-Length a replay sends (0 for an omitted body), so a
// replay does not format it again.
func (c *capture) record(fp store.Fingerprint) *store.Record {
	trailer := c.trailers()
	if len(trailer) > 0 && int64(len(c.body))+fieldsSize(trailer) > c.bodyLimit {
		// Trailers count toward max_response_body as the body does: an
		// answer whose trailers take it over is recorded without its body
		// and trailers, as one whose body does; a gRPC answer keeps its
		// status (withGRPCStatus).
		all := trailer
		c.omitted, c.body, trailer = true, nil, nil
		if c.grpc {
			trailer = withGRPCStatus(nil, all)
		}
	}
	switch {
	case c.bodiless:
	case len(trailer) > 0 && c.declared < 0:
		// Sent without a length so that the trailers could follow (a
		// gRPC answer): replayed the same way.
		delete(c.header, "Content-Length")
	case c.head:
		// The announced length is the answer to a HEAD: keep it as sent.
		delete(c.header, "Content-Length")
		if c.declared >= 0 {
			c.header["Content-Length"] = c.lengthField(c.declared)
		}
	default:
		c.header["Content-Length"] = c.lengthField(int64(len(c.body)))
	}
	c.rec = store.Record{
		Status:      c.status,
		Header:      c.header,
		Body:        c.body,
		Trailer:     trailer,
		BodyOmitted: c.omitted,
		Fingerprint: fp,
		CreatedAt:   c.answered,
	}
	return &c.rec
}

// withGRPCStatus adds the grpc-status of src to dst, a new header when dst
// is nil, and returns it: what a gRPC answer's record keeps of a header
// section or trailers too large to record, one short field without which
// a replay would be no gRPC answer at all. dst is returned as it is when
// src has none.
func withGRPCStatus(dst, src http.Header) http.Header {
	if v := src[grpcwire.StatusField]; len(v) > 0 {
		if dst == nil {
			dst = make(http.Header, 1)
		}
		dst[grpcwire.StatusField] = v
	}
	return dst
}

// trailers are the trailer fields the upstream sent after the body, as the
// reverse proxy left them in the capture's header: those it announced
// under the Trailer field, and those under http.TrailerPrefix. The
// control header's were removed when the call ended (capture.end). nil
// when there are none: only a flushed response can have any.
func (c *capture) trailers() http.Header {
	if !c.flushed {
		return nil
	}
	var out http.Header
	add := func(k string, v []string) {
		if len(v) == 0 {
			return
		}
		if out == nil {
			out = make(http.Header)
		}
		out[http.CanonicalHeaderKey(k)] = v
	}
	for _, list := range c.hdr["Trailer"] {
		for name := range strings.SplitSeq(list, ",") {
			name = http.CanonicalHeaderKey(strings.TrimSpace(name))
			add(name, c.hdr[name])
		}
	}
	for k, v := range c.hdr {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			add(name, v)
		}
	}
	return out
}

// fieldsSize is the size recordableHeader counts for fields h.
func fieldsSize(h http.Header) int64 {
	var size int64
	for k, vs := range h {
		for _, v := range vs {
			size += int64(len(k) + len(v) + 4)
		}
	}
	return size
}

// lengthField is a Content-Length field of n: the upstream's own when it
// said n as a replay says it, which is nearly always, else a new one.
func (c *capture) lengthField(n int64) []string {
	var b [20]byte
	if v := c.sentLength; len(v) == 1 && v[0] == string(strconv.AppendInt(b[:0], n, 10)) {
		return v
	}
	return []string{strconv.FormatInt(n, 10)}
}
