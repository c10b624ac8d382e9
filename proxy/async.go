package proxy

import (
	"context"
	"net/http"
	"strings"
)

// A keyed request carrying Prefer: respond-async, on a route with async:
// allow, is answered 202 Accepted as soon as its lease is taken: Location
// names its status URL, and the upstream call runs detached, bounded as
// any detached call (detach.go), its answer recorded as usual. A retry of
// the key while it runs gets the same 202; a GET of the status URL gets
// 202 while it runs and the recorded answer once there is one
// (docs/request-handling.md, "Long operations"). The status URL and the
// 202 that names it are asyncstatus.go's.

// prefersAsync reports whether h asks for respond-async (RFC 7240): a
// preference among others, its token in any case, its parameters (wait=N
// among them) ignored: the 202 goes out as soon as the lease is taken.
func prefersAsync(h http.Header) bool {
	for _, line := range h["Prefer"] {
		for line != "" {
			var pref string
			pref, line = cutPreference(line)
			tok, _, _ := strings.Cut(pref, ";")
			tok, _, _ = strings.Cut(tok, "=")
			if strings.EqualFold(strings.TrimSpace(tok), "respond-async") {
				return true
			}
		}
	}
	return false
}

// cutPreference cuts the first preference of a Prefer field line from the
// rest: at the first comma outside a quoted-string, whose value may hold
// commas and backslash-escaped quotes (RFC 7240 §2, RFC 9110 §5.6.4).
func cutPreference(line string) (pref, rest string) {
	quoted, escaped := false, false
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case escaped:
			escaped = false
		case quoted && c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			return line[:i], line[i+1:]
		}
	}
	return line, ""
}

// wantsAsync reports whether q is to be answered 202 with a status URL.
// A shadow route answers as a plain reverse proxy would: no 202. Nor does
// a gRPC call get one: its client reads an answer that is not a gRPC
// status as UNKNOWN, and has no status URL to poll.
func (h *Handler) wantsAsync(q *request) bool {
	return q.route.policy.Async == AsyncAllow && q.route.policy.Mode != ModeShadow && !q.grpc &&
		len(h.async.secret) > 0 && prefersAsync(q.in.Header)
}

// executeAsync forwards the first request of a key detached from its
// client, which gets 202 right away. With no room among the detached calls
// (upstream.max_detached, max_detached_bytes), the client waits for the
// call as without the preference.
func (h *Handler) executeAsync(detached context.Context, w http.ResponseWriter, q *request) {
	h.prepareCall(detached, w, q)
	if !h.detachAtOnce(q) {
		h.callers.Start(q)
		h.await(w, q)
		return
	}
	// The proxy applies the preference: an upstream that honours it too
	// would answer 202, and that would be the recorded answer.
	dropRespondAsync(q.upstream.Header)
	q.accepted = true // before the call starts, which reads it
	h.callers.Start(q)
	h.accepted(w, q)
}

// dropRespondAsync removes the respond-async preference from h, keeping
// the others.
func dropRespondAsync(h http.Header) {
	var kept []string
	for _, line := range h["Prefer"] {
		for line != "" {
			var pref string
			pref, line = cutPreference(line)
			if !prefersAsync(http.Header{"Prefer": {pref}}) && strings.TrimSpace(pref) != "" {
				kept = append(kept, strings.TrimSpace(pref))
			}
		}
	}
	if len(kept) == 0 {
		delete(h, "Prefer")
		return
	}
	h["Prefer"] = []string{strings.Join(kept, ", ")}
}

// detachAtOnce detaches q's call before it starts, so nothing of its
// answer goes to the client, and reports whether there was room.
func (h *Handler) detachAtOnce(q *request) bool {
	q.reserved = detachedRoom(q)
	if !h.detachable.Take(q.reserved) {
		h.metrics.detachRefused.Inc()
		h.log.Warn("too many upstream calls detached from their clients (upstream.max_detached, upstream.max_detached_bytes): this respond-async request is served synchronously",
			"route", q.route.label, "key_hash", q.keyHash)
		return false
	}
	if ok, _ := q.capture.detach(h.metrics.detached); !ok {
		h.detachable.Give(q.reserved)
		return false
	}
	return true
}
