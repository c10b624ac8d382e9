package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// capture is the ResponseWriter the first request of a key is served
// through. It streams every byte to the client as it arrives and keeps a
// copy, up to a limit, to record. A client that goes away does not stop it:
// writes keep succeeding so the reverse proxy reads the upstream response to
// the end and the retry can be replayed (SPEC §5).
type capture struct {
	rw    http.ResponseWriter
	limit int64
	route *route

	wroteHeader bool
	status      int
	header      http.Header
	body        []byte
	omitted     bool
	recording   bool
	clientGone  bool
	written     int64

	// Set by the reverse proxy's error handler. sent is false only when
	// the upstream could not be dialled: nothing reached it.
	upstreamErr error
	sent        bool
}

var _ http.ResponseWriter = (*capture)(nil)

func (c *capture) Header() http.Header { return c.rw.Header() }

func (c *capture) WriteHeader(code int) {
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		// Informational responses go to the client and are never recorded.
		if !c.clientGone {
			c.rw.WriteHeader(code)
		}
		return
	}
	if c.wroteHeader {
		return
	}
	c.wroteHeader = true
	c.status = code
	h := c.rw.Header()
	c.recording = !c.route.releases(code)
	if c.recording {
		c.header = recordableHeader(h)
		if n, err := strconv.ParseInt(h.Get("Content-Length"), 10, 64); err == nil {
			if n > c.limit {
				c.omitted = true
			} else if n > 0 {
				c.body = make([]byte, 0, n)
			}
		}
	}
	if !c.clientGone {
		c.rw.WriteHeader(code)
	}
}

func (c *capture) Write(p []byte) (int, error) {
	if !c.wroteHeader {
		c.WriteHeader(http.StatusOK)
	}
	c.written += int64(len(p))
	if c.recording && !c.omitted {
		if int64(len(c.body)+len(p)) > c.limit {
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

// record returns the captured response as a store record. Its header
// carries the Content-Length a replay sends (0 for an omitted body), so a
// replay does not format it again.
func (c *capture) record(fp store.Fingerprint) *store.Record {
	if bodyAllowed(c.status) {
		c.header["Content-Length"] = []string{strconv.Itoa(len(c.body))}
	}
	return &store.Record{
		Status:      c.status,
		Header:      c.header,
		Body:        c.body,
		BodyOmitted: c.omitted,
		Fingerprint: fp,
		CreatedAt:   time.Now(),
	}
}
