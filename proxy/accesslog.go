package proxy

import (
	"log/slog"
	"net/http"
	"time"
)

// SetAccessLog turns the access log on or off for requests that start
// from now on (a reload of access_log).
func (h *Handler) SetAccessLog(on bool) { h.accessLog.Store(on) }

// counted is a request's writer while the access log is on: it notes the
// status and the number of body bytes sent to the client, whoever writes
// them (a replay, the reverse proxy, a problem). It is the request itself,
// so it costs no allocation.
type counted request

// counting returns w wrapped to count what reaches the client.
func (q *request) counting(w http.ResponseWriter) http.ResponseWriter {
	q.out = w
	return (*counted)(q)
}

func (c *counted) Header() http.Header { return c.out.Header() }

func (c *counted) Write(p []byte) (int, error) {
	if c.sentCode == 0 {
		c.sentCode = http.StatusOK
	}
	n, err := c.out.Write(p)
	c.sentBytes += int64(n)
	return n, err
}

// WriteHeader notes the final status; interim (1xx) ones pass through.
func (c *counted) WriteHeader(code int) {
	if c.sentCode == 0 && code >= 200 {
		c.sentCode = code
	}
	c.out.WriteHeader(code)
}

// FlushError flushes the client's writer: a capture around this writer
// flushes through it by these methods, not by Unwrap.
func (c *counted) FlushError() error { return http.NewResponseController(c.out).Flush() }

// Unwrap gives http.ResponseController the client's writer, for flushes,
// full duplex and the hijack of a protocol upgrade.
func (c *counted) Unwrap() http.ResponseWriter { return c.out }

// logAccess writes the request's access line: every request, pass-through
// included; the path without its query, never a header or a body.
func (h *Handler) logAccess(q *request, outcome Outcome, status int, d time.Duration) {
	ctx := q.in.Context()
	if !h.log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	if q.sentCode != 0 {
		status = q.sentCode // what the client got, pass-through included
	}
	// The record goes to the handler without a caller's program counter:
	// Logger.LogAttrs walks the stack for one on every line (a fifth of the
	// line's cost), and the process's handler never reports a source.
	rec := slog.NewRecord(time.Now(), slog.LevelInfo, "access", 0)
	rec.AddAttrs(
		slog.String("method", q.in.Method), slog.String("path", q.in.URL.Path),
		slog.String("route", q.route.label), slog.Int("status", status),
		slog.String("outcome", string(outcome)), slog.Float64("duration_seconds", d.Seconds()),
		slog.Int64("bytes", q.sentBytes), slog.String("key_hash", q.keyHash))
	_ = h.log.Handler().Handle(ctx, rec) // a line that cannot be written is lost, as with LogAttrs
}
