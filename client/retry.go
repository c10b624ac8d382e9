package client

import (
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// action is what the client does with an answer.
type action int

const (
	done  action = iota // the operation's answer: returned to the caller
	retry               // same request, same key, after Retry-After or backoff
	stop                // the proxy's problem that no retry can change: an error
)

// problemActions decides each of the proxy's problem types. It is the Go copy
// of clients/contract.json, which TestClientFollowsTheContract holds it to.
var problemActions = map[string]action{
	ProblemMissingKey:          stop,
	ProblemInvalidKey:          stop,
	ProblemBodyUnreadable:      stop,
	ProblemAmbiguousBody:       stop,
	ProblemAmbiguousPath:       stop,
	ProblemAmbiguousMethod:     stop,
	ProblemBodyTooLarge:        stop,
	ProblemInFlight:            retry,
	ProblemKeyExpired:          stop,
	ProblemPayloadMismatch:     stop,
	ProblemStoreUnavailable:    retry,
	ProblemStoreFull:           retry,
	ProblemRecordUnreadable:    stop,
	ProblemUpstreamUnreachable: retry,
	ProblemUpstreamFailed:      retry,
	ProblemUpstreamTimeout:     retry,
	ProblemStatusUnknown:       stop,
	ProblemStatusMethod:        stop,
	ProblemStreamingCall:       stop,
}

// ProblemRetried reports what a client does with an answer of the proxy's
// problem type t (a URI, ProblemInFlight say): retry it with the same key
// (true), or stop (false). known is false when t is none of the proxy's
// problem types. The gRPC interceptor (client/grpcidem) decides by it, so
// both read one list.
func ProblemRetried(t string) (retried, known bool) {
	a, ok := problemActions[t]
	return a == retry, ok
}

// statusAction decides an answer that carries none of the proxy's problem
// types, the upstream's own included: these statuses say the operation may
// not have run, or its answer is not known yet; a retry gets the answer, or
// its replay.
func statusAction(code int) action {
	switch code {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return retry
	}
	return done
}

// attemptResult is the outcome of one attempt.
type attemptResult struct {
	resp *http.Response // nil on transport error
	err  error          // transport error, or a fatal request error
	// fatal errors concern the request itself; retrying cannot help.
	fatal bool
	// action is set by classify.
	action  action
	problem *Problem
	// retryAfter is the server's Retry-After, valid when hasRetryAfter.
	retryAfter    time.Duration
	hasRetryAfter bool
}

// classify decides what a response means for the operation: a replay is
// the recorded answer (asking again returns it again); one of the proxy's
// problem types is decided by problemActions; anything else by its status.
func (r *attemptResult) classify(now func() time.Time) {
	resp := r.resp
	if Replayed(resp) || resp.StatusCode < 400 {
		return
	}
	r.problem = readProblem(resp)
	act, ok := done, false
	if r.problem != nil {
		act, ok = problemActions[r.problem.Type]
	}
	if !ok {
		act = statusAction(resp.StatusCode)
	}
	r.action = act
	if act != retry {
		return
	}
	if v := resp.Header.Get("Retry-After"); v != "" {
		if now == nil {
			now = time.Now
		}
		r.retryAfter, r.hasRetryAfter = parseRetryAfter(v, now())
	}
}

// final reports whether the operation ends with this attempt.
func (r attemptResult) final() bool {
	return r.fatal || (r.resp != nil && r.action != retry)
}

// deliver turns a final attempt into Do's result.
func (r attemptResult) deliver(key string) (*http.Response, error) {
	switch {
	case r.fatal:
		return nil, r.err
	case r.action == stop:
		drainAndClose(r.resp)
		if r.problem.Type == ProblemPayloadMismatch {
			return nil, &MismatchError{Key: key, Problem: *r.problem}
		}
		return nil, &ProblemError{Key: key, StatusCode: r.resp.StatusCode, Problem: *r.problem}
	}
	return r.resp, nil
}

// parseRetryAfter reads RFC 9110 §10.2.3 Retry-After: delta-seconds or an
// HTTP-date. A date in the past means "now"; either form is at most a day
// (maxRetryAfter).
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		// Clamp before multiplying so a huge value cannot overflow.
		if secs > int64(maxRetryAfter/time.Second) {
			secs = int64(maxRetryAfter / time.Second)
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(t.Sub(now), 0), maxRetryAfter), true
}

// maxRetryAfter bounds a Retry-After in either form, so that a date decades
// off reads as delta-seconds as large would.
const maxRetryAfter = 24 * time.Hour

// delay is the wait after the n-th attempt (n ≥ 1): the server's Retry-After
// if it sent one, else exponential backoff with full jitter, a uniform random
// duration in [0, min(MaxDelay, BaseDelay·2^(n-1))). Full jitter spreads the
// retries of many clients that failed together. Both are capped by MaxDelay.
func (c *Client) delay(n int, r attemptResult) time.Duration {
	maxDelay := c.MaxDelay
	if maxDelay <= 0 {
		maxDelay = DefaultMaxDelay
	}
	if r.hasRetryAfter {
		return min(r.retryAfter, maxDelay)
	}
	base := c.BaseDelay
	if base <= 0 {
		base = DefaultBaseDelay
	}
	ceiling := maxDelay
	// Stop doubling once past maxDelay; also keeps the shift from overflowing.
	if n-1 < 62 && base <= maxDelay>>(n-1) {
		ceiling = base << (n - 1)
	}
	if ceiling <= 0 {
		return 0
	}
	jitter := c.jitter
	if jitter == nil {
		jitter = rand.Int64N
	}
	return time.Duration(jitter(int64(ceiling)))
}
