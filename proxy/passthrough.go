package proxy

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/grpcwire"
)

// passThrough forwards a request the proxy does not protect with its body
// streamed, as it arrives.
//
// Over HTTP/1 it first enables full duplex. Otherwise, when the upstream
// answers before the transport has sent the whole request body, net/http's
// server finishes with that body as the response starts — it drains what
// remains and closes it — while the transport is still reading it to send
// it upstream: the transport fails and drops the upstream connection in
// the middle of the response, which is cut off (golang/go#40747). HTTP/2
// is always full duplex.
//
// A gRPC call over HTTP/2 is freed of the listener's read timeout, which
// bounds a slow request body: HTTP/2 runs it per stream from the stream's
// start, so it would end the request stream of every gRPC stream that
// lasts longer, as if its client had hung up.
func (h *Handler) passThrough(w http.ResponseWriter, q *request, r *http.Request) {
	if r.Body == &q.bodyReader {
		// The body read for its _method parameters (methodparam.go) is
		// read through q, which is recycled once ServeHTTP returns, and
		// the transport may read a body after that: it gets its own.
		held := q.bodyReader
		r.Body = &held
	}
	switch {
	case r.ProtoMajor == 1 && r.Body != nil && r.Body != http.NoBody:
		if err := http.NewResponseController(serverWriter(w)).EnableFullDuplex(); err != nil {
			// A ResponseWriter wrapper without Unwrap hides the server's:
			// the request is still forwarded, with net/http's default.
			h.log.LogAttrs(r.Context(), slog.LevelDebug, "full duplex unavailable for a streamed pass-through request",
				slog.String("error", err.Error()))
		}
	case r.ProtoMajor == 2 && grpcwire.IsGRPC(r.Header.Get("Content-Type")):
		if err := http.NewResponseController(serverWriter(w)).SetReadDeadline(time.Time{}); err != nil {
			h.log.LogAttrs(r.Context(), slog.LevelDebug, "the read timeout stays on a passed-through gRPC call",
				slog.String("error", err.Error()))
		}
	}
	start := h.clock.Now()
	h.rp.ServeHTTP(w, r)
	q.upstreamTook.Store(int64(max(h.clock.Now().Sub(start), 1)))
}

// serverWriter is w without the proxy's own wrappers (counted, unrecorded),
// which pass a ResponseController's requests through by Unwrap: it then
// asks the writer beneath at once, instead of trying each wrapper's
// interfaces on the way down.
func serverWriter(w http.ResponseWriter) http.ResponseWriter {
	for {
		switch t := w.(type) {
		case *counted:
			w = t.out
		case *unrecorded:
			w = t.capture.rw
		default:
			return w
		}
	}
}
