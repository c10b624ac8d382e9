package proxy

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"

	"github.com/idempotency-proxy/idempotency-proxy/internal/problemjson"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// A keyed request carrying Prefer: respond-async, on a route with async:
// allow, is answered 202 Accepted as soon as its lease is taken: Location
// names its status URL, and the upstream call runs detached, bounded as
// any detached call (detach.go), its answer recorded as usual. A retry of
// the key while it runs gets the same 202; a GET of the status URL gets
// 202 while it runs and the recorded answer once there is one
// (docs/request-handling.md, "Long operations").
//
// The status URL is the storage key and a MAC of it and of the request's
// scope header values under the deployment's async secret. It is checked,
// never remembered: any replica with the secret serves it from the shared
// store, across restarts. Without the secret nobody can make one for a
// key_hash read in a log, and without the original's scope headers a poll
// fails the MAC: both get 404, as an unknown or expired key does.

// DefaultAsyncPath is where status URLs are served by default.
const DefaultAsyncPath = "/.well-known/idempotency/"

// asyncRetryAfter is the Retry-After, in seconds, of a 202: how soon a
// client polls again.
const asyncRetryAfter = "1"

// asyncStatus makes and checks status URLs.
type asyncStatus struct {
	path   string // the status URLs' prefix, ending in "/"
	secret []byte // empty: respond-async is off
}

// serves reports whether r is a poll of a status URL.
func (a *asyncStatus) serves(r *http.Request) bool {
	return len(a.secret) > 0 && strings.HasPrefix(r.URL.Path, a.path)
}

// location is the status URL of a key whose request had the scope
// values of r under rt.
func (a *asyncStatus) location(keyHash string, r *http.Request, rt *route) string {
	raw, err := hex.DecodeString(keyHash)
	if err != nil { // storage keys are hex: no status URL for another
		return ""
	}
	tok := append(raw, a.mac(keyHash, r, rt)...)
	return a.path + base64.RawURLEncoding.EncodeToString(tok)
}

// mac binds a key to the scope values of the request that sent it.
func (a *asyncStatus) mac(keyHash string, r *http.Request, rt *route) []byte {
	m := hmac.New(sha256.New, a.secret)
	m.Write([]byte("status-url\x00"))
	m.Write([]byte(keyHash))
	m.Write([]byte{0})
	m.Write([]byte(rt.label))
	d := scopeDigest(r, rt.scope)
	m.Write(d[:])
	return m.Sum(nil)[:16]
}

// scopeDigest hashes r's values of the scope headers as the storage key
// does.
func scopeDigest(r *http.Request, scope []ScopeHeader) [sha256.Size]byte {
	hs := getHasher()
	for _, p := range scope {
		if p.Cookie != "" {
			hs.cookie(r.Header["Cookie"], p.Cookie)
			continue
		}
		hs.values(r.Header[p.Header])
	}
	return hs.finish()
}

// parse returns the storage key and the MAC a status URL path names.
func (a *asyncStatus) parse(path string) (keyHash string, mac []byte, ok bool) {
	tok, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(path, a.path))
	if err != nil || len(tok) != 32 {
		return "", nil, false
	}
	return hex.EncodeToString(tok[:16]), tok[16:], true
}

// prefersAsync reports whether h asks for respond-async (RFC 7240): a
// preference among others, its token in any case, its parameters (wait=N
// among them) ignored: the 202 goes out as soon as the lease is taken.
func prefersAsync(h http.Header) bool {
	for _, line := range h["Prefer"] {
		for line != "" {
			var pref string
			pref, line, _ = strings.Cut(line, ",")
			tok, _, _ := strings.Cut(pref, ";")
			tok, _, _ = strings.Cut(tok, "=")
			if strings.EqualFold(strings.TrimSpace(tok), "respond-async") {
				return true
			}
		}
	}
	return false
}

// wantsAsync reports whether q is to be answered 202 with a status URL.
func (h *Handler) wantsAsync(q *request) bool {
	// A shadow route answers as a plain reverse proxy would: no 202.
	return q.route.policy.Async == AsyncAllow && q.route.policy.Mode != ModeShadow &&
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
			pref, line, _ = strings.Cut(line, ",")
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
	q.reserved = int64(len(q.body)) + q.route.policy.MaxResponseBody
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

// accepted answers 202 with q's status URL.
func (h *Handler) accepted(w http.ResponseWriter, q *request) {
	q.outcome, q.status = OutcomeAcceptedAsync, http.StatusAccepted
	writeAccepted(w, h.async.location(q.keyHash, q.in, q.route))
}

// writeAccepted writes the 202 of a request running, or still running,
// whose status URL is loc.
func writeAccepted(w http.ResponseWriter, loc string) {
	hdr := w.Header()
	hdr.Set("Location", loc)
	hdr.Set("Preference-Applied", "respond-async")
	hdr.Set("Retry-After", asyncRetryAfter)
	hdr.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	w.Write([]byte(`{"status":"running","location":"` + loc + `"}` + "\n"))
}

// serveStatus answers a poll of a status URL.
func (h *Handler) serveStatus(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		problemjson.Write(w, probStatusMethod.Body("a status URL answers GET and HEAD"), 0)
		return
	}
	keyHash, mac, ok := h.async.parse(r.URL.Path)
	if !ok || h.inspector == nil {
		writeProblem(w, probStatusUnknown, "")
		return
	}
	e, err := h.inspector.Inspect(context.WithoutCancel(r.Context()), keyHash)
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeProblem(w, probStatusUnknown, "")
		return
	case err != nil:
		writeProblem(w, probStore, "the status could not be read; try again")
		return
	}
	var label string
	switch {
	case e.State == store.InFlight:
		label = e.Lease.Request.Route
	case e.State == store.Completed && e.Record != nil:
		label = e.Record.Request.Route
	default:
		writeProblem(w, probStatusUnknown, "")
		return
	}
	rt := h.routes.Load().byLabel(label)
	if rt == nil || !hmac.Equal(mac, h.async.mac(keyHash, r, rt)) {
		writeProblem(w, probStatusUnknown, "")
		return
	}
	if e.State == store.InFlight {
		writeAccepted(w, r.URL.Path)
		return
	}
	if e.Unreadable != nil {
		writeProblem(w, probUnreadable, "the recorded response cannot be read")
		return
	}
	expires := ""
	if rt.policy.AdvertiseExpiry && !isProblemRecord(e.Record) {
		expires = expiresValue(e.Record.CreatedAt, rt.policy.ttlFor(e.Record.Status))
	}
	replay(w, r, e.Record, rt.policy.ReplayExcludeHeaders, expires)
}
