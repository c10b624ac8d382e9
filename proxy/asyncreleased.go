package proxy

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// A released key records nothing: a retry with it executes again. A client
// told so synchronously (502 upstream-unreachable, the upstream's 503 in
// release_statuses) retries; a client that was answered 202 and polls its
// status URL would find no key there, and a 404 status-unknown tells it to
// stop. So when the key of a call whose status URL was given is released,
// the answer that client would have been told is kept as a released note,
// for releasedNoteTTL, under a storage key the status URL names
// (noteKey): a poll that finds no key there answers the note, marked
// Idempotent-Released, and the client sends the request again with its key
// (docs/request-handling.md, "Long operations").
//
// A status URL is given to the call's own client (executeAsync), or to a
// retry with respond-async while the call ran, on any proxy sharing the
// store (serveKeyed), which marks it given in the store first
// (markStatusURLGiven). A release no status URL was given for leaves no
// note: a burst of release statuses answered to clients that wait for
// them writes nothing more to the store, and costs a read or two of the
// mark (notesBeforeRelease, noteAfterRelease).
//
// A poll reads the key first: a retry that took the key again is followed,
// running or recorded, and the note only answers while the key is free,
// when a resend executes it once. A note is never read by a request with
// the key: the key's next request executes, as after any release. A store
// that cannot keep the note (down, full) leaves the poll its 404.

// ReleasedHeader marks a poll's answer that is its request's own answer
// with its key released: the client decides it as it would the request's,
// and when that is to retry, sends the request again with its key.
const ReleasedHeader = "Idempotent-Released"

// releasedNoteTTL is how long a released note is kept: thirty times the
// Retry-After of a 202 (asyncRetryAfter), so that a client whose polls its
// own backoff delayed still finds it.
const releasedNoteTTL = 30 * time.Second

// noteKey is the storage key of the released note of the request a status
// URL names by keyHash and mac: only a holder of the URL can name it.
func noteKey(keyHash string, mac []byte) string {
	s := sha256.New()
	s.Write([]byte("released-note\x00"))
	s.Write([]byte(keyHash))
	s.Write(mac)
	return hex.EncodeToString(s.Sum(nil)[:16]) + store.ReleasedSuffix
}

// notesRelease reports whether q's key, if released, may leave a note: on
// a route that gives status URLs, whether or not q's own call was detached
// from its client, since a retry with respond-async while it ran may have
// been given the status URL (serveKeyed). A gRPC call gets none. Whether
// one was given decides (notesBeforeRelease).
func (h *Handler) notesRelease(q *request) bool {
	return q.route.policy.Async == AsyncAllow && len(h.async.secret) > 0 && !q.grpc
}

// urlGivenKey is the storage key of the mark that a status URL was given
// for keyHash while a call of it ran.
func urlGivenKey(keyHash string) string {
	s := sha256.Sum256([]byte("status-url-given\x00" + keyHash))
	return hex.EncodeToString(s[:16]) + store.ReleasedSuffix
}

// markStatusURLGiven marks in the store that q, a retry with respond-async
// of a key whose call runs, is given its status URL, for as long as that
// call may run and be settled. The retry then asks for the key again:
// either the call's release comes after the mark, and reads it
// (noteAfterRelease), or the key is free, and the retry takes it. A mark
// the store did not keep leaves the poll its 404 if the key is released.
func (h *Handler) markStatusURLGiven(ctx context.Context, q *request) {
	lease := store.Lease{Fingerprint: q.fp, Request: q.desc, Instance: h.instance}
	if _, err := h.store.Begin(ctx, urlGivenKey(q.keyHash), lease, h.maxExecution+q.route.policy.LockTTL); err != nil {
		h.log.Warn("could not mark a respond-async request's status URL given: if its key is released, a poll answers 404",
			"route", q.route.label, "key_hash", q.keyHash, "error", err)
	}
}

// statusURLGiven reports whether a status URL of q's key was given to a
// retry while q's call ran: its mark is in the store, or the store cannot
// tell.
func (h *Handler) statusURLGiven(ctx context.Context, q *request) bool {
	if h.inspector == nil {
		return false // no status URL is answered (serveStatus)
	}
	_, err := h.inspector.Inspect(ctx, urlGivenKey(q.keyHash))
	return !errors.Is(err, store.ErrNotFound)
}

// noteComing reports whether a poll of the status URL mac of keyHash,
// which found neither the key nor its note, is of a retry that was given
// its status URL while the call ran (markStatusURLGiven, the mark made for
// this URL's request): its call's release may read the mark after the key
// is freed and only then write the note, so for a moment the key is free
// and the note not yet written (awaitNote).
func (h *Handler) noteComing(ctx context.Context, r *http.Request, keyHash string, mac []byte) bool {
	e, err := h.inspector.Inspect(ctx, urlGivenKey(keyHash))
	if err != nil || e.State != store.InFlight {
		return false
	}
	rt := h.routes.Load().byLabel(e.Lease.Request.Route)
	return rt != nil && hmac.Equal(mac, h.async.mac(keyHash, e.Fingerprint, r, rt))
}

// lateNoteWait bounds how long a poll waits for a note on its way
// (awaitNote), reading it again every lateNoteStep. The note is written a
// store round trip after the release; a release that keeps none (no-store,
// a shutdown) or a note expired leaves the poll its 404 after the wait,
// while the mark, which lives as long as the call might, would answer
// "running" for minutes.
const (
	lateNoteWait = time.Second
	lateNoteStep = 50 * time.Millisecond
)

// awaitNote reads the note under key until it is there, lateNoteWait has
// passed or the poll's client is gone (client), and returns what the last
// read found.
func (h *Handler) awaitNote(client context.Context, key string) (store.Entry, error) {
	ctx := context.WithoutCancel(client)
	until := h.clock.Now().Add(lateNoteWait)
	for {
		select {
		case <-client.Done():
			return store.Entry{}, store.ErrNotFound
		case <-h.clock.After(lateNoteStep):
		}
		e, err := h.inspector.Inspect(ctx, key)
		if !errors.Is(err, store.ErrNotFound) || !h.clock.Now().Before(until) {
			return e, err
		}
	}
}

// notesBeforeRelease reports whether q's release keeps its note before
// the key is released: q's own client was answered 202 with its status
// URL, or a retry given one while q's call ran marked it. Otherwise the
// mark is read once more after the release (noteAfterRelease).
func (h *Handler) notesBeforeRelease(ctx context.Context, q *request) bool {
	return q.accepted || h.statusURLGiven(ctx, q)
}

// releasedAnswer is the upstream's answer to q in release_statuses as its
// note keeps it: the status and header fields, without the body, which a
// release status's capture does not keep.
func (c *capture) releasedAnswer(fp store.Fingerprint) *store.Record {
	hdr := make(map[string][]string, len(c.hdr))
	for k, v := range c.hdr {
		switch k {
		case "Content-Length", "Content-Type", "Content-Encoding", "Trailer", "Transfer-Encoding":
			continue // of the body, which the note does not keep
		}
		if len(v) > 0 && !strings.HasPrefix(k, http.TrailerPrefix) {
			hdr[k] = append([]string(nil), v...)
		}
	}
	hdr["Content-Length"] = []string{"0"}
	return &store.Record{Status: c.status, Header: hdr, Fingerprint: fp, CreatedAt: c.answered}
}

// noteReleased keeps rec, the answer q's client would have been told, as
// the released note of q's status URL, replacing an earlier one. It runs
// before the key is released, so a poll finds the key or the note.
func (h *Handler) noteReleased(ctx context.Context, q *request, rec *store.Record) {
	key := noteKey(q.keyHash, h.async.mac(q.keyHash, q.fp, q.in, q.route))
	rec.Request = q.desc
	lease := store.Lease{Fingerprint: q.fp, Request: q.desc, Instance: h.instance}
	for range 2 {
		res, err := h.store.Begin(ctx, key, lease, q.route.policy.LockTTL)
		switch {
		case err != nil:
			h.noteLost(q, err)
			return
		case res.State == store.Acquired:
			if err := h.store.Complete(ctx, key, res.Token, rec, releasedNoteTTL); err != nil {
				h.noteLost(q, err)
			}
			return
		case h.forgetter == nil:
			h.noteLost(q, errors.New("the store cannot replace an earlier note"))
			return
		}
		// An earlier release of the same request left its note: replaced.
		if err := h.forgetter.Delete(ctx, key); err != nil && !errors.Is(err, store.ErrNotFound) {
			h.noteLost(q, err)
			return
		}
	}
}

// noteLost logs a released note the store did not keep.
func (h *Handler) noteLost(q *request, err error) {
	h.log.Warn("could not keep the answer of a released respond-async request: a poll of its status URL answers 404",
		"route", q.route.label, "key_hash", q.keyHash, "error", err)
}

// serveReleased answers a poll of a status URL whose key the store does
// not hold for it: the released note, when there is one, else 404.
func (h *Handler) serveReleased(w http.ResponseWriter, r *http.Request, keyHash string, mac []byte) {
	ctx := context.WithoutCancel(r.Context())
	key := noteKey(keyHash, mac)
	e, err := h.inspector.Inspect(ctx, key)
	if errors.Is(err, store.ErrNotFound) && h.noteComing(ctx, r, keyHash, mac) {
		// Released a moment ago, its note perhaps on its way
		// (noteAfterRelease): a 404 now would tell the client to stop.
		e, err = h.awaitNote(r.Context(), key)
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeProblem(w, probStatusUnknown, "")
		return
	case err != nil:
		writeProblem(w, probStore, "the status could not be read; try again")
		return
	}
	if e.State != store.Completed || e.Record == nil || e.Unreadable != nil {
		writeProblem(w, probStatusUnknown, "")
		return
	}
	rt := h.routes.Load().byLabel(e.Record.Request.Route)
	if rt == nil || !hmac.Equal(mac, h.async.mac(keyHash, e.Fingerprint, r, rt)) {
		writeProblem(w, probStatusUnknown, "")
		return
	}
	// A note keeps no body (releasedAnswer): nothing to decode, and no
	// decoding error to report.
	_ = writeKept(w, r, e.Record, rt.policy.ReplayExcludeHeaders, "", ReleasedHeader)
}
