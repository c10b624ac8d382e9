package client

import (
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// attemptResult is the outcome of one attempt.
type attemptResult struct {
	resp *http.Response // nil on transport error
	err  error          // transport error, or a fatal request error
	// fatal errors concern the request itself; retrying cannot help.
	fatal bool
	// retry is set by classify for responses worth another attempt.
	retry bool
	// mismatch marks the proxy's 422 payload-mismatch answer.
	mismatch bool
	problem  *Problem
	// retryAfter is the server's Retry-After, valid when hasRetryAfter.
	retryAfter    time.Duration
	hasRetryAfter bool
}

// classify decides what a response means for the operation.
func (r *attemptResult) classify(now func() time.Time) {
	resp := r.resp
	switch resp.StatusCode {
	case http.StatusConflict, http.StatusTooManyRequests, http.StatusServiceUnavailable,
		http.StatusBadGateway, http.StatusGatewayTimeout:
		// A replay is the recorded answer: asking again returns it again.
		r.retry = !Replayed(resp)
	case http.StatusUnprocessableEntity:
		r.problem = readProblem(resp)
		r.mismatch = r.problem != nil && r.problem.Type == ProblemPayloadMismatch
		return
	default:
		return
	}
	if !r.retry {
		return
	}
	r.problem = readProblem(resp)
	if v := resp.Header.Get("Retry-After"); v != "" {
		if now == nil {
			now = time.Now
		}
		r.retryAfter, r.hasRetryAfter = parseRetryAfter(v, now())
	}
}

// final reports whether the operation ends with this attempt.
func (r attemptResult) final() bool {
	return r.fatal || (r.resp != nil && !r.retry)
}

// deliver turns a final attempt into Do's result.
func (r attemptResult) deliver(key string) (*http.Response, error) {
	switch {
	case r.fatal:
		return nil, r.err
	case r.mismatch:
		drainAndClose(r.resp)
		return nil, &MismatchError{Key: key, Problem: *r.problem}
	}
	return r.resp, nil
}

// parseRetryAfter reads RFC 9110 §10.2.3 Retry-After: delta-seconds or an
// HTTP-date. A date in the past means "now".
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		// Clamp before multiplying so a huge value cannot overflow.
		if secs > int64(24*time.Hour/time.Second) {
			secs = int64(24 * time.Hour / time.Second)
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

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
