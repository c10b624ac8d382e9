// Package problemjson writes the RFC 9457 application/problem+json answers
// of the proxy listener and the admin API: one body shape, one set of
// headers. What each problem type means, and what a client does with it, is
// clients/contract.json.
package problemjson

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// ContentType is the media type of every problem answer.
const ContentType = "application/problem+json"

// Base prefixes the type URI of every problem the proxy and its admin API
// answer themselves, so a client can tell the proxy's 422 from its
// upstream's (clients/contract.json's problem_base).
const Base = "https://idempotency-proxy.dev/problems/"

// Problem is one kind of problem answer: its type URI (Base and a name),
// title and status, and the Retry-After it asks for.
type Problem struct {
	Type   string
	Title  string
	Status int
	// RetryAfter, in seconds, is sent as Retry-After when positive.
	RetryAfter int
}

// The problems both listeners answer, declared once.
var (
	// StoreUnavailable: the store did not answer in time; the proxy did not
	// call the upstream, the admin API changed nothing.
	StoreUnavailable = Problem{Type: Base + "store-unavailable", Title: "Idempotency store unavailable", Status: http.StatusServiceUnavailable, RetryAfter: 2}
)

// Body is p's body with detail.
func (p Problem) Body(detail string) Body {
	return Body{Type: p.Type, Title: p.Title, Status: p.Status, Detail: detail}
}

// Body is a problem answer's JSON body.
type Body struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// StartedAt is an extension member of in-flight: when the request
	// holding the key started (RFC 3339, milliseconds, UTC).
	StartedAt string `json:"started_at,omitempty"`
}

// Marshal is b as sent: its JSON and a newline.
func (b Body) Marshal() []byte {
	out, _ := json.Marshal(b) // strings and an int: cannot fail
	return append(out, '\n')
}

// Write answers with b, never cached, with Retry-After when retryAfter (in
// seconds) is positive.
func Write(w http.ResponseWriter, b Body, retryAfter int) {
	body := b.Marshal()
	h := w.Header()
	h.Set("Content-Type", ContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(b.Status)
	w.Write(body)
}
