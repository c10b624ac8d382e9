package proxy

import (
	"net/http"
	"slices"
	"strconv"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/idempotency-proxy/idempotency-proxy/internal/problemjson"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

const problemContentType = problemjson.ContentType

// Header values the proxy sets; shared because header maps only read them.
var (
	headerTrue = []string{"true"}
	headerZero = []string{"0"}
)

// replayRecord answers q with rec, the record its key holds.
func (h *Handler) replayRecord(w http.ResponseWriter, q *request, rec *store.Record) {
	pol := &q.route.policy
	h.replay(w, q.in, q.keyHash, rec, pol.ReplayExcludeHeaders, expiresOf(pol, rec))
}

// replay writes a recorded response, marked Idempotent-Replayed; keyHash
// names its key in the log line of a body that could not be decoded.
// expires, when not "", is sent as Idempotency-Expires.
func (h *Handler) replay(w http.ResponseWriter, r *http.Request, keyHash string, rec *store.Record, exclude []string, expires string) {
	if err := writeKept(w, r, rec, exclude, expires, "Idempotent-Replayed"); err != nil {
		h.logUndecodable(keyHash, rec, err)
	}
}

// writeKept writes a response the store kept, marked by the header field
// mark: a record (replay), or a released note (serveReleased). Records
// made by capture carry their Content-Length. A body encoded in a coding
// r does not accept is decoded (replaydecode.go); one that does not
// decode is written as recorded, and its error returned.
func writeKept(w http.ResponseWriter, r *http.Request, rec *store.Record, exclude []string, expires, mark string) error {
	dst := w.Header()
	trailers := sendsTrailers(rec.Trailer, exclude)
	var decodeErr error
	var decoded int64
	var coding string
	if ce := rec.Header["Content-Encoding"]; len(ce) > 0 {
		// Encoded (rare): decoded for a client that does not accept it.
		if coding = replayDecoding(r, rec, ce); coding != "" {
			if decoded, decodeErr = decodedSize(coding, rec.Body); decodeErr != nil {
				coding = ""
			}
		}
	}
	for k, v := range rec.Header {
		if slices.Contains(exclude, k) {
			continue
		}
		// Records are shared and read-only: cap the slice so that an
		// append by anyone downstream copies instead of writing into it.
		dst[k] = v[:len(v):len(v)]
	}
	// What the upstream did not send, the replay does not gain either.
	keepContentTypeUnset(dst, rec.Status)
	dst[mark] = headerTrue
	if expires != "" {
		dst[ExpiresHeader] = []string{expires}
	}
	switch {
	case !bodyAllowed(rec.Status):
	case rec.BodyOmitted:
		// Whatever length the upstream announced, none of it is sent. The
		// trailers kept follow the empty body: no length, so that the
		// response is chunked over HTTP/1.1, as below.
		dst["Idempotent-Body-Omitted"] = headerTrue
		if !trailers {
			dst["Content-Length"] = headerZero
		} else {
			delete(dst, "Content-Length")
		}
	case r.Method == http.MethodHead:
		// The length a HEAD was answered with is recorded as it came: a
		// replay announcing none where none came, not the empty body's 0.
	case coding != "":
		decodedHeader(dst, decoded, trailers)
	case len(rec.Header["Content-Length"]) == 0 && !trailers:
		dst["Content-Length"] = []string{strconv.Itoa(len(rec.Body))}
	}
	w.WriteHeader(rec.Status)
	if trailers {
		// Trailers follow the body, as they came: the header goes out now,
		// without a length the server would otherwise compute, so that the
		// response is chunked over HTTP/1.1 (as the reverse proxy forces it)
		// and the trailers after it.
		http.NewResponseController(w).Flush()
	}
	switch {
	case coding != "":
		writeDecoded(w, coding, rec.Body)
	case len(rec.Body) > 0 && r.Method != http.MethodHead && bodyAllowed(rec.Status):
		w.Write(rec.Body)
	}
	if !trailers {
		return decodeErr
	}
	for k, v := range rec.Trailer {
		if slices.Contains(exclude, k) {
			continue // replay_exclude_headers holds after the body too
		}
		dst[http.TrailerPrefix+k] = v[:len(v):len(v)]
	}
	return decodeErr
}

// sendsTrailers reports whether a replay of trailer fields t sends any: a
// field replay_exclude_headers does not name, whose name a trailer may
// have, with a value the wire can carry. A replay that would send none is
// one without trailers. Go's HTTP/2 server, left only fields it has
// nothing to encode for, writes no trailer section and never ends the
// stream (golang/net#31, never merged): the client would wait for the
// answer's end until its deadline.
func sendsTrailers(t map[string][]string, exclude []string) bool {
	for k, vs := range t {
		if slices.Contains(exclude, k) || !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidTrailerHeader(k) {
			continue
		}
		for _, v := range vs {
			if httpguts.ValidHeaderFieldValue(v) {
				return true
			}
		}
	}
	return false
}

// expiresOf is the Idempotency-Expires value of a replay of rec on a route
// of policy pol, "" when the route does not advertise expiry or rec is the
// proxy's own problem response (a 502 kept under on_upstream_error: keep).
func expiresOf(pol *Policy, rec *store.Record) string {
	if !pol.AdvertiseExpiry || isProblemRecord(rec) {
		return ""
	}
	return expiresValue(rec.CreatedAt, pol.ttlFor(rec.Status))
}

// isProblemRecord reports whether rec is a problem response the proxy
// answered itself (problemRecord) rather than the upstream's.
func isProblemRecord(rec *store.Record) bool {
	ct := rec.Header["Content-Type"]
	return rec.Status == http.StatusBadGateway && len(ct) == 1 && ct[0] == problemContentType
}

func bodyAllowed(status int) bool {
	return status != http.StatusNoContent && status != http.StatusNotModified && status >= 200
}

// problemRecord is a problem response to record and replay, for an upstream
// failure kept under on_upstream_error: keep.
func problemRecord(p problem, detail string, fp store.Fingerprint) *store.Record {
	body := problemJSON(p, detail)
	return &store.Record{
		Status: p.Status,
		Header: map[string][]string{
			"Content-Type":   {problemContentType},
			"Cache-Control":  {"no-store"},
			"Content-Length": {strconv.Itoa(len(body))},
		},
		Body:        body,
		Fingerprint: fp,
		CreatedAt:   time.Now(),
	}
}
