package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"
)

// Problem type URIs of the proxy's RFC 9457 error responses (docs/clients.md lists them with
// what the client does on each; clients/contract.json is the list). They let a caller tell
// the proxy's answers from the upstream's own.
const (
	problemBase = "https://idempotency-proxy.dev/problems/"

	ProblemMissingKey          = problemBase + "missing-key"          // 400: key required, none sent
	ProblemInvalidKey          = problemBase + "invalid-key"          // 400: empty, too long, non-printable or repeated
	ProblemBodyUnreadable      = problemBase + "body-unreadable"      // 400: request body could not be read
	ProblemAmbiguousBody       = problemBase + "ambiguous-body"       // 400: JSON body readable two ways (duplicate names)
	ProblemAmbiguousPath       = problemBase + "ambiguous-path"       // 400: path readable two ways (%2F, %5C, ;)
	ProblemAmbiguousMethod     = problemBase + "ambiguous-method"     // 400: method-override headers name two methods
	ProblemBodyTooLarge        = problemBase + "body-too-large"       // 413: over max_request_body
	ProblemInFlight            = problemBase + "in-flight"            // 409: first request with the key still running
	ProblemKeyExpired          = problemBase + "key-expired"          // 410: the key's record expired; not executed again
	ProblemPayloadMismatch     = problemBase + "payload-mismatch"     // 422: key reused with a different payload
	ProblemStoreUnavailable    = problemBase + "store-unavailable"    // 503: proxy's store down, upstream not called
	ProblemStoreFull           = problemBase + "store-full"           // 503: proxy's store full, upstream not called
	ProblemRecordUnreadable    = problemBase + "record-unreadable"    // 503: the recorded answer cannot be read; never executed again
	ProblemUpstreamUnreachable = problemBase + "upstream-unreachable" // 502: request never reached the upstream
	ProblemUpstreamFailed      = problemBase + "upstream-failed"      // 502: upstream failed after the request was sent
	ProblemUpstreamTimeout     = problemBase + "upstream-timeout"     // 504: upstream still running; retries get 409, then its answer
	ProblemStatusUnknown       = problemBase + "status-unknown"       // 404: no such status URL, or not this caller's, or expired
	ProblemStatusMethod        = problemBase + "status-method"        // 405: a status URL answers GET and HEAD only
	ProblemStreamingCall       = problemBase + "streaming-call"       // gRPC UNIMPLEMENTED: a stream on a route that requires a key
)

// maxProblemBody bounds how much of an error body is read to parse it.
const maxProblemBody = 64 << 10

var (
	// ErrKeyReused means the server already saw the operation's key with a
	// different payload. It is a bug in the caller (a key reused for another
	// operation, or a payload that changed between retries); retrying with the
	// same key can never succeed. Returned wrapped in a *MismatchError.
	ErrKeyReused = errors.New("client: idempotency key reused with a different payload")
	// ErrKeyExpired means the operation's key was completed once and its
	// record has expired: the proxy refuses to execute it again (410
	// key-expired). Look the operation's outcome up another way. Returned
	// wrapped in a *ProblemError.
	ErrKeyExpired = errors.New("client: idempotency key expired")
	// ErrAttemptsExhausted is the cause of a *RetryError whose every attempt
	// got a retryable status.
	ErrAttemptsExhausted = errors.New("client: attempts exhausted")
	// ErrBodyTooLarge means a request body without GetBody is larger than
	// MaxBufferedBody and so cannot be replayed across attempts.
	ErrBodyTooLarge = errors.New("client: request body too large to replay")
)

// Problem is an RFC 9457 problem detail.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// StartedAt is when the request holding the key began, on a 409
	// in-flight: how long a retry has been waiting for it. Zero when the
	// problem has none (a lease taken by an earlier proxy version, or any
	// other problem).
	StartedAt time.Time `json:"started_at,omitzero"`
}

// UnmarshalJSON reads a problem whose started_at is anything but an RFC
// 3339 time (an upstream's own extension member, a Unix time say) with a
// zero StartedAt, rather than refusing the whole problem: the client read
// such a problem before it knew started_at, and still does.
func (p *Problem) UnmarshalJSON(b []byte) error {
	type fields Problem // without this method
	var v struct {
		fields
		StartedAt json.RawMessage `json:"started_at"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*p = Problem(v.fields)
	var t time.Time
	if json.Unmarshal(v.StartedAt, &t) == nil {
		p.StartedAt = t
	}
	return nil
}

// MismatchError is returned for the proxy's 422 payload-mismatch answer.
type MismatchError struct {
	// Key is the idempotency key that was reused.
	Key string
	// Problem is the proxy's problem detail.
	Problem Problem
}

func (e *MismatchError) Error() string {
	msg := fmt.Sprintf("%v (key %q)", ErrKeyReused, e.Key)
	if e.Problem.Detail != "" {
		msg += ": " + e.Problem.Detail
	}
	return msg
}

// Unwrap makes errors.Is(err, ErrKeyReused) hold.
func (e *MismatchError) Unwrap() error { return ErrKeyReused }

// ProblemError is returned for the proxy's answers that retrying with the
// same key cannot change (a missing or invalid key, a body too large or
// ambiguous, an expired key, a record that cannot be read): a problem in
// the request or the deployment, not the operation's outcome.
type ProblemError struct {
	// Key is the operation's idempotency key.
	Key string
	// StatusCode is the proxy's status.
	StatusCode int
	// Problem is the proxy's problem detail.
	Problem Problem
}

func (e *ProblemError) Error() string {
	msg := fmt.Sprintf("client: proxy answered %d %s (key %q)", e.StatusCode, e.Problem.Type, e.Key)
	if e.Problem.Detail != "" {
		msg += ": " + e.Problem.Detail
	}
	return msg
}

// Unwrap makes errors.Is(err, ErrKeyExpired) hold for a 410 key-expired.
func (e *ProblemError) Unwrap() error {
	if e.Problem.Type == ProblemKeyExpired {
		return ErrKeyExpired
	}
	return nil
}

// RetryError is returned when Do gives up: attempts exhausted or ctx done.
type RetryError struct {
	// Key is the idempotency key every attempt carried; resending it later
	// (within the server's TTL) continues the same operation.
	Key string
	// Attempts is how many requests were sent.
	Attempts int
	// StatusCode is the status of the last response, 0 if the last attempt
	// failed without one.
	StatusCode int
	// Problem is the last response's problem detail, if it had one.
	Problem *Problem
	// Err is why the client stopped: the last transport error, the context's
	// error, or ErrAttemptsExhausted.
	Err error
}

func (e *RetryError) Error() string {
	last := "no response"
	if e.StatusCode != 0 {
		last = fmt.Sprintf("last status %d", e.StatusCode)
		if e.Problem != nil && e.Problem.Type != "" {
			last += " (" + e.Problem.Type + ")"
		}
	}
	return fmt.Sprintf("client: gave up after %d attempt(s), %s: %v", e.Attempts, last, e.Err)
}

func (e *RetryError) Unwrap() error { return e.Err }

// readProblem parses resp's body as problem+json without consuming it: the
// bytes read are put back in front of the rest of the body. It returns nil
// for any other content type or an unparsable body.
func readProblem(resp *http.Response) *Problem {
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || mt != "application/problem+json" {
		return nil
	}
	buf, err := io.ReadAll(io.LimitReader(resp.Body, maxProblemBody))
	resp.Body = &rereadBody{Reader: io.MultiReader(bytes.NewReader(buf), resp.Body), Closer: resp.Body}
	if err != nil {
		return nil
	}
	var p Problem
	if json.Unmarshal(buf, &p) != nil {
		return nil
	}
	return &p
}

// rereadBody replays the bytes readProblem consumed, then the rest of the
// original body, and closes the original.
type rereadBody struct {
	io.Reader
	io.Closer
}
