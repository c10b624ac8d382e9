package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/enum"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Key API limits.
const (
	maxKeyHashLen = 128     // hex digits; storage keys are far shorter
	maxHashBody   = 1 << 20 // POST /admin/hash request body
	opTimeout     = 10 * time.Second
)

// ListLimit is how many keys one page of a list returns at most: the limit
// parameter of GET /admin/keys and the keys command's --limit, from 1 to
// MaxListLimit.
type ListLimit int

// The limits of a page of keys.
const (
	DefaultListLimit ListLimit = 100
	MaxListLimit     ListLimit = 1000
)

func (l ListLimit) String() string { return strconv.Itoa(int(l)) }

// MarshalText gives the limit as a number.
func (l ListLimit) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText reads a whole number from 1 to MaxListLimit.
func (l *ListLimit) UnmarshalText(b []byte) error {
	n, err := strconv.Atoi(string(b))
	if err != nil || n < 1 || n > int(MaxListLimit) {
		return fmt.Errorf("must be a whole number from 1 to %d; got %q", MaxListLimit, b)
	}
	*l = ListLimit(n)
	return nil
}

// stateWords are the words of a list's state filter, in the order of
// listStates.
var (
	stateWords = enum.Words{"all", store.InFlight.String(), store.Completed.String()}
	listStates = []store.State{0, store.InFlight, store.Completed}
)

// ListState reads the state filter of a list: "in_flight", "completed", or
// "all" (or nothing) for 0, every state. The keys command reads its --state
// with it.
func ListState(s string) (store.State, error) {
	if s == "" {
		return 0, nil
	}
	i, err := stateWords.Parse(s)
	if err != nil {
		return 0, err
	}
	return listStates[i], nil
}

// Operations, the values of the "operation" label.
const (
	opGet    = "get"
	opDelete = "delete"
	opList   = "list"
	opHash   = "hash"
	opConfig = "config"
	opReport = "report"
)

func (h *Handler) routeKeys(mux *http.ServeMux) {
	routes := []struct {
		method, path, op string
		fn               http.HandlerFunc
	}{
		{http.MethodGet, "/admin/keys/{key_hash}", opGet, h.getKey},
		{http.MethodDelete, "/admin/keys/{key_hash}", opDelete, h.deleteKey},
		{http.MethodGet, "/admin/keys", opList, h.listKeys},
		{http.MethodPost, "/admin/hash", opHash, h.hashKey},
		{http.MethodGet, "/admin/config", opConfig, h.getConfig},
		{http.MethodGet, "/admin/report", opReport, h.getReport},
	}
	// resources matches the paths alone, whatever the method, so that a
	// method a path does not serve is told apart from a path that is none.
	resources := http.NewServeMux()
	allow := map[string][]string{}
	for _, rt := range routes {
		mux.HandleFunc(rt.method+" "+rt.path, requireToken(h.token, h.metrics, rt.op, rt.fn))
		if allow[rt.path] == nil {
			resources.Handle(rt.path, http.NotFoundHandler())
		}
		allow[rt.path] = append(allow[rt.path], rt.method)
		if rt.method == http.MethodGet {
			allow[rt.path] = append(allow[rt.path], http.MethodHead) // the mux serves HEAD with GET
		}
	}
	// Everything else under /admin/ is 404 without the token, so that a
	// prober learns nothing; with it, a 405 naming the methods of a path
	// the API serves, or a 404 for a path it does not.
	unserved := requireToken(h.token, h.metrics, "other", func(w http.ResponseWriter, r *http.Request) {
		_, pattern := resources.Handler(r)
		if methods := allow[pattern]; methods != nil {
			list := strings.Join(methods, ", ")
			w.Header().Set("Allow", list)
			writeProblem(w, probMethod, r.URL.Path+" answers "+list+", not "+r.Method+".")
			return
		}
		writeProblem(w, probNoResource, "The admin API has no "+r.URL.Path+"; docs/operating.md lists its requests.")
	})
	mux.HandleFunc("/admin/", unserved)
	// /admin itself too: else the mux redirects it to /admin/, token or
	// not, and a prober learns that the subtree exists.
	mux.HandleFunc("/admin", unserved)
}

func (h *Handler) getKey(w http.ResponseWriter, r *http.Request) {
	key, ok := h.keyHash(w, r, opGet)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	e, err := h.keys.Inspect(ctx, key)
	if errors.Is(err, store.ErrUnreadable) {
		// Stored bytes that do not decode: a record, as the proxy takes
		// it, shown with why it cannot be read.
		e, err = store.UnreadableEntry(key, false, time.Time{}, err), nil
	}
	if err != nil {
		h.storeFailed(w, opGet, key, err)
		return
	}
	out := newEntryJSON(e)
	if e.State == store.InFlight {
		out.Settling = h.settling(ctx, key)
	}
	h.metrics.count(opGet, resultOK)
	writeJSON(w, http.StatusOK, out)
}

// settling says whether the key in flight is being settled by lookups: its
// marker is there, or this process settles it. A marker written before
// the request was sent, its outcome still pending, says it is in flight.
func (h *Handler) settling(ctx context.Context, key string) *settlingJSON {
	if h.opts.Settling != nil {
		if since, probes, ok := h.opts.Settling(key); ok {
			return &settlingJSON{Since: rfc3339(since), Probes: &probes}
		}
	}
	m, err := h.keys.Inspect(ctx, key+store.ReconcileSuffix)
	if err != nil || m.State != store.Completed || m.Record == nil || len(m.Record.Header[store.MarkerPending]) > 0 {
		return nil
	}
	return &settlingJSON{Since: rfc3339(m.Record.CreatedAt)}
}

func (h *Handler) deleteKey(w http.ResponseWriter, r *http.Request) {
	key, ok := h.keyHash(w, r, opDelete)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	err := h.keys.Delete(ctx, key)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		h.storeFailed(w, opDelete, key, err)
		return
	}
	// A key deleted is new: its marker, left, would make the next request
	// with it look the outcome up instead of executing. The marker
	// outlives the lease of a settling proxy that died, so it is deleted
	// even when the key is gone, and then it is what was deleted.
	merr := h.keys.Delete(ctx, key+store.ReconcileSuffix)
	if merr != nil && !errors.Is(merr, store.ErrNotFound) {
		h.storeFailed(w, opDelete, key, merr)
		return
	}
	if err != nil && merr != nil {
		h.storeFailed(w, opDelete, key, err) // neither was there: 404
		return
	}
	h.metrics.count(opDelete, resultOK)
	h.log.Warn("admin deleted key", "key_hash", key, "remote_addr", r.RemoteAddr)
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) listKeys(w http.ResponseWriter, r *http.Request) {
	if h.keys == nil {
		h.unsupported(w, opList)
		return
	}
	state, limit, cursor, detail := listParams(r.URL.Query())
	if detail != "" {
		h.badRequest(w, opList, detail)
		return
	}
	raw, find := r.URL.Query()["key"]
	if find && raw[0] == "" {
		h.badRequest(w, opList, "key is empty: give the raw idempotency key the client sent.")
		return
	}
	if find {
		// Only records keep a lookup: a lease is found by its key_hash.
		state = store.Completed
	}
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	entries, next, err := h.keys.List(ctx, state, cursor, limit)
	if err != nil {
		if p, _ := storeProblem(err); p == probInternal && cursor != "" {
			// The store answered and refused the request: the cursor is
			// not one it handed out (or its node left the cluster).
			h.badRequest(w, opList, err.Error()+".")
			return
		}
		h.storeFailed(w, opList, "", err)
		return
	}
	if find {
		entries = withRawKey(entries, raw[0])
	}
	out := listJSON{Keys: make([]entryJSON, 0, len(entries)), NextCursor: next}
	for _, e := range entries {
		// A settling marker belongs to its key, which keys get shows; a
		// released note to a status URL, for its polls (docs/operating.md).
		if !strings.HasSuffix(e.Key, store.ReconcileSuffix) && !strings.HasSuffix(e.Key, store.ReleasedSuffix) {
			out.Keys = append(out.Keys, newEntryJSON(e))
		}
	}
	h.metrics.count(opList, resultOK)
	writeJSON(w, http.StatusOK, out)
}

// withRawKey keeps the entries whose record was written for the raw
// idempotency key, in any scope. A page of the listing is scanned, so a
// page may find none and still have a next_cursor: a search pages through
// the whole store (idempotency-proxy keys find does).
func withRawKey(entries []store.Entry, raw string) []store.Entry {
	want := store.LookupKey(raw)
	found := entries[:0]
	for _, e := range entries {
		if e.Record != nil && e.Record.Lookup.Key == want {
			found = append(found, e)
		}
	}
	return found
}

// listParams reads state, limit and cursor; detail says what is wrong.
func listParams(q url.Values) (state store.State, limit int, cursor, detail string) {
	state, err := ListState(q.Get("state"))
	if err != nil {
		return 0, 0, "", "state " + err.Error() + "."
	}
	l := DefaultListLimit
	if s := q.Get("limit"); s != "" {
		if err := l.UnmarshalText([]byte(s)); err != nil {
			return 0, 0, "", "limit " + err.Error() + "."
		}
	}
	return state, int(l), q.Get("cursor"), ""
}

// hashRequest is the body of POST /admin/hash: the parts of a request that
// name its storage key. Source says which of the route's key sources the
// key came from ("json:/order_id"; default its first). Without a key, the
// key is found in the request described, body included, as the proxy
// finds it (docs/operating.md).
type hashRequest struct {
	Key     string            `json:"key"`
	Source  string            `json:"source"`
	Method  string            `json:"method"`
	Host    string            `json:"host"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
	Body    *string           `json:"body"`
}

func (h *Handler) hashKey(w http.ResponseWriter, r *http.Request) {
	if h.opts.Hasher == nil {
		h.unsupported(w, opHash)
		return
	}
	var in hashRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxHashBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		h.badRequest(w, opHash, "The body must be a JSON object with key, method, host, path and headers: "+err.Error()+".")
		return
	}
	req, detail := in.request()
	if detail != "" {
		h.badRequest(w, opHash, detail)
		return
	}
	sum, err := h.opts.Hasher.KeyHashFrom(req, in.Key, in.Source)
	if err != nil {
		h.badRequest(w, opHash, err.Error()+".")
		return
	}
	h.metrics.count(opHash, resultOK)
	writeJSON(w, http.StatusOK, map[string]string{"key_hash": sum})
}

// request builds the request the hash is asked for; method defaults to
// POST and path to "/".
func (in hashRequest) request() (*http.Request, string) {
	if in.Key == "" && in.Body == nil && len(in.Headers) == 0 {
		return nil, "key is required (or the request's headers and body to find it in)."
	}
	method := strings.ToUpper(in.Method)
	if method == "" {
		method = http.MethodPost
	}
	path := in.Path
	if path == "" {
		path = "/"
	}
	u, err := url.ParseRequestURI(path)
	if err != nil || u.Host != "" {
		return nil, "path must be an absolute path such as /v1/charges."
	}
	hdr := make(http.Header, len(in.Headers))
	for name, v := range in.Headers {
		hdr.Set(name, v)
	}
	req := &http.Request{Method: method, URL: u, Host: in.Host, Header: hdr, RequestURI: path}
	if in.Body != nil {
		req.Body = io.NopCloser(strings.NewReader(*in.Body))
		req.ContentLength = int64(len(*in.Body))
	}
	return req, ""
}

// keyHash reads and checks the {key_hash} path value.
func (h *Handler) keyHash(w http.ResponseWriter, r *http.Request, op string) (string, bool) {
	if h.keys == nil {
		h.unsupported(w, op)
		return "", false
	}
	key := r.PathValue("key_hash")
	if !ValidKeyHash(key) {
		h.badRequest(w, op, "A key_hash is the lowercase hex storage key found in the proxy's logs (or from POST /admin/hash).")
		return "", false
	}
	return key, true
}

// ValidKeyHash reports whether s is a key_hash: lowercase hex, as the
// proxy's logs show it, not a raw idempotency key.
func ValidKeyHash(s string) bool {
	if s == "" || len(s) > maxKeyHashLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func (h *Handler) badRequest(w http.ResponseWriter, op, detail string) {
	h.metrics.count(op, resultBadRequest)
	writeProblem(w, probBadRequest, detail)
}

func (h *Handler) unsupported(w http.ResponseWriter, op string) {
	h.metrics.count(op, resultError)
	writeProblem(w, probUnsupported, "")
}

func (h *Handler) storeFailed(w http.ResponseWriter, op, key string, err error) {
	p, result := storeProblem(err)
	h.metrics.count(op, result)
	if result == resultNotFound {
		writeProblem(w, p, "Nothing is stored under key_hash "+key+": never used, expired, or deleted.")
		return
	}
	h.log.Error("admin operation failed", "operation", op, "key_hash", key, "error", err)
	writeProblem(w, p, err.Error())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeProblem(w, probInternal, err.Error())
		return
	}
	body = append(body, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(body)
}

func (h *Handler) getConfig(w http.ResponseWriter, r *http.Request) {
	if h.opts.Config == nil {
		h.unsupported(w, opConfig)
		return
	}
	h.metrics.count(opConfig, resultOK)
	w.Header().Set("Content-Type", "application/yaml; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(h.opts.Config())
}
