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

// The status URL is the storage key and a MAC of it, of the request's
// fingerprint and of its scope header values under the deployment's async
// secret. It is checked, never remembered: any replica with the secret
// serves it from the shared store, across restarts. Without the secret
// nobody can make one for a key_hash read in a log, and without the
// original's scope headers a poll fails the MAC: both get 404, as an
// unknown or expired key does. The fingerprint keeps the URL to the one
// request it was given for: a key whose record expired and that the client
// sends again with another payload is not that request's answer.

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

// location is the status URL of a key whose request had the fingerprint
// fp and the scope values of r under rt.
func (a *asyncStatus) location(keyHash string, fp store.Fingerprint, r *http.Request, rt *route) string {
	raw, err := hex.DecodeString(keyHash)
	if err != nil { // storage keys are hex: no status URL for another
		return ""
	}
	tok := append(raw, a.mac(keyHash, fp, r, rt)...)
	return a.path + base64.RawURLEncoding.EncodeToString(tok)
}

// mac binds a key to the fingerprint and scope values of the request that
// sent it.
func (a *asyncStatus) mac(keyHash string, fp store.Fingerprint, r *http.Request, rt *route) []byte {
	m := hmac.New(sha256.New, a.secret)
	m.Write([]byte("status-url\x00"))
	m.Write([]byte(keyHash))
	m.Write([]byte{0})
	m.Write(fp[:])
	m.Write([]byte(rt.label))
	d := scopeDigest(r, rt.scope)
	m.Write(d[:])
	return m.Sum(nil)[:16]
}

// scopeDigest hashes r's values of the scope headers as the storage key
// does.
func scopeDigest(r *http.Request, scope []ScopeHeader) [sha256.Size]byte {
	hs := getHasher()
	hs.scopeValues(r, scope)
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

// accepted answers 202 with q's status URL.
func (h *Handler) accepted(w http.ResponseWriter, q *request) {
	q.outcome, q.status = OutcomeAcceptedAsync, http.StatusAccepted
	writeAccepted(w, h.async.location(q.keyHash, q.fp, q.in, q.route))
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
		// Released, expired or never there: its released note, if any,
		// says which (asyncreleased.go).
		h.serveReleased(w, r, keyHash, mac)
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
		h.serveReleased(w, r, keyHash, mac)
		return
	}
	rt := h.routes.Load().byLabel(label)
	if rt == nil || !hmac.Equal(mac, h.async.mac(keyHash, e.Fingerprint, r, rt)) {
		// The key is another request's now (another payload): this
		// one's released note, if any, still answers.
		h.serveReleased(w, r, keyHash, mac)
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
	h.replay(w, r, keyHash, e.Record, rt.policy.ReplayExcludeHeaders, expiresOf(&rt.policy, e.Record))
}
