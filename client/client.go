package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Defaults of the zero-valued Client fields.
const (
	DefaultMaxAttempts     = 5
	DefaultBaseDelay       = 100 * time.Millisecond
	DefaultMaxDelay        = 10 * time.Second
	DefaultMaxBufferedBody = 10 << 20 // the proxy's default max_request_body
	DefaultMaxPolls        = 600      // ten minutes at the proxy's Retry-After of 1s
)

// Response headers set by the proxy on replays, and on a status URL's
// answer of a request whose key was released (docs/request-handling.md,
// docs/guarantees.md).
const (
	HeaderReplayed    = "Idempotent-Replayed"
	HeaderBodyOmitted = "Idempotent-Body-Omitted"
	HeaderReleased    = "Idempotent-Released"
)

// Client sends requests with an idempotency key and retries them safely. The
// zero value is ready to use; a Client is safe for concurrent use and must
// not be changed while in use.
type Client struct {
	// HTTP sends each attempt; nil means http.DefaultClient. Its
	// CheckRedirect is not used: a redirect is the operation's answer,
	// returned to the caller, never followed with the key.
	HTTP *http.Client
	// MaxAttempts is how many requests one operation may send, first
	// included; 0 means DefaultMaxAttempts.
	MaxAttempts int
	// BaseDelay is the backoff before the second attempt; it doubles on each
	// retry. 0 means DefaultBaseDelay.
	BaseDelay time.Duration
	// MaxDelay caps every wait, Retry-After included; 0 means DefaultMaxDelay.
	MaxDelay time.Duration
	// AttemptTimeout bounds one attempt, reading the returned response's
	// body included (like http.Client.Timeout); 0 means no per-attempt
	// bound, only ctx's.
	AttemptTimeout time.Duration
	// MaxBufferedBody bounds the copy kept of a request body that has no
	// GetBody, in bytes; 0 means DefaultMaxBufferedBody.
	MaxBufferedBody int64
	// RespondAsync sends each attempt with Prefer: respond-async. A proxy
	// route with async: allow then answers 202 with a status URL instead
	// of holding the connection, and Do follows the status URL until the
	// operation's answer (docs/clients.md, "Long operations").
	RespondAsync bool
	// MaxPolls bounds the polls of a status URL under RespondAsync, each
	// after the 202's Retry-After (capped by MaxDelay); 0 means
	// DefaultMaxPolls. ctx bounds them too.
	MaxPolls int
	// OnRetry, when set, is called before each wait between two attempts
	// with why the client retries and how long it waits: for logs and
	// metrics. It must not block.
	OnRetry func(Retry)

	// Test seams; nil means the real clock, sleep and random source.
	now    func() time.Time
	sleep  func(ctx context.Context, d time.Duration) error
	jitter func(n int64) int64 // uniform in [0, n)
}

// Replayed reports whether resp is a replay of an earlier execution rather
// than the answer of a fresh one.
func Replayed(resp *http.Response) bool { return isTrue(resp.Header.Get(HeaderReplayed)) }

// BodyOmitted reports whether resp is a replay whose body was not recorded
// because it was too large: the status and headers are the original's, the
// body is empty. The operation did execute; fetch its result another way.
func BodyOmitted(resp *http.Response) bool { return isTrue(resp.Header.Get(HeaderBodyOmitted)) }

// Released reports whether resp, a poll's answer, is its request's own
// answer with the key released: the upstream did not process the request
// (or it is unknown whether it did), the proxy recorded nothing, and a
// request sent again with the key executes.
func Released(resp *http.Response) bool { return isTrue(resp.Header.Get(HeaderReleased)) }

func isTrue(v string) bool { return strings.EqualFold(strings.TrimSpace(v), "true") }

// KeyOf returns the idempotency key resp's request carried.
func KeyOf(resp *http.Response) string {
	if resp.Request == nil {
		return ""
	}
	return resp.Request.Header.Get(HeaderKey)
}

// Do sends req as one logical operation, retrying with the same key as the
// package documentation describes. ctx bounds the whole operation and
// replaces req's own context. Do closes req.Body, like http.Client.Do.
//
// On success the caller must close the response body. A non-nil error is a
// *RetryError, a *MismatchError, a *ProblemError, or an error about the
// request itself (an invalid key, a body that cannot be replayed); the
// response is then nil.
func (c *Client) Do(ctx context.Context, req *http.Request) (*http.Response, error) {
	key, err := operationKey(ctx, req)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	body, err := replayableBody(req, c.maxBufferedBody())
	if err != nil {
		return nil, err
	}
	closeBody(req) // every attempt reads its own copy from body.

	maxAttempts := c.maxAttempts()
	for n := 1; ; n++ {
		last := c.attempt(ctx, req, key, body)
		if last.final() && c.RespondAsync && accepted(last.resp, req.URL) {
			resp, released, err := c.follow(ctx, req, key, last.resp)
			if released == nil {
				return resp, err
			}
			// The key was released: the poll answered what this attempt
			// would have been told, and the request is sent again.
			last = *released
		}
		if last.final() {
			return last.deliver(key)
		}
		if n == maxAttempts || ctx.Err() != nil {
			return nil, last.giveUp(ctx, key, n)
		}
		d := c.delay(n, last)
		if c.OnRetry != nil {
			c.OnRetry(last.retryInfo(n, d))
		}
		if c.wait(ctx, d) != nil {
			return nil, last.giveUp(ctx, key, n)
		}
	}
}

// Retry describes one retry, for Client.OnRetry.
type Retry struct {
	// Attempt is the attempt that failed, from 1.
	Attempt int
	// Delay is the wait before the next attempt.
	Delay time.Duration
	// StatusCode is the failed attempt's status, 0 for a transport error
	// or an attempt timeout.
	StatusCode int
	// Problem is the failed attempt's problem detail, if it had one.
	Problem *Problem
	// Err is the transport error, nil when there was a response.
	Err error
}

func (r attemptResult) retryInfo(n int, d time.Duration) Retry {
	info := Retry{Attempt: n, Delay: d, Problem: r.problem, Err: r.err}
	if r.resp != nil {
		info.StatusCode = r.resp.StatusCode
	}
	return info
}

// operationKey picks the operation's key: the request header, else WithKey's,
// else a new random one.
func operationKey(ctx context.Context, req *http.Request) (string, error) {
	key := req.Header.Get(HeaderKey)
	if key == "" {
		if k, ok := keyFromContext(ctx); ok {
			key = k
		} else {
			key = NewKey()
		}
	}
	if err := validateKey(key); err != nil {
		return "", err
	}
	return key, nil
}

// attempt sends one request and classifies its outcome. Responses that will
// be retried are drained and closed here.
func (c *Client) attempt(ctx context.Context, req *http.Request, key string, body *bodySource) attemptResult {
	actx, cancel := ctx, context.CancelFunc(func() {})
	if c.AttemptTimeout > 0 {
		actx, cancel = context.WithTimeout(ctx, c.AttemptTimeout)
	}
	r := req.Clone(actx)
	r.Header.Set(HeaderKey, key)
	if c.RespondAsync {
		r.Header.Add("Prefer", "respond-async")
	}
	if body != nil {
		rc, err := body.get()
		if err != nil {
			cancel()
			return attemptResult{err: fmt.Errorf("client: replaying request body: %w", err), fatal: true}
		}
		r.Body, r.ContentLength = rc, body.length
	}
	return c.exchange(r, cancel)
}

// exchange sends r, whose context cancel ends once its body is closed,
// and classifies the answer; a body the caller will not read is drained.
func (c *Client) exchange(r *http.Request, cancel context.CancelFunc) attemptResult {
	resp, err := c.httpClient().Do(r)
	if err != nil {
		cancel()
		return attemptResult{err: err}
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	res := attemptResult{resp: resp}
	res.classify(c.now)
	if !res.final() {
		drainAndClose(resp)
	}
	return res
}

// httpClient is HTTP (or http.DefaultClient) with its redirects answered,
// not followed: a redirect is the operation's answer, handed to the caller.
// Followed, it would carry the key and the body to another URL: behind the
// proxy a different request under the same key (422 payload-mismatch,
// though the operation ran), on another origin an execution the proxy never
// sees, run again by each retry of a lost answer.
func (c *Client) httpClient() *http.Client {
	hc := http.DefaultClient
	if c.HTTP != nil {
		hc = c.HTTP
	}
	answered := *hc
	answered.CheckRedirect = answerRedirect
	return &answered
}

func answerRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

func (c *Client) maxAttempts() int {
	if c.MaxAttempts > 0 {
		return c.MaxAttempts
	}
	return DefaultMaxAttempts
}

func (c *Client) maxBufferedBody() int64 {
	if c.MaxBufferedBody > 0 {
		return c.MaxBufferedBody
	}
	return DefaultMaxBufferedBody
}

// wait sleeps for d or until ctx is done.
func (c *Client) wait(ctx context.Context, d time.Duration) error {
	if c.sleep != nil {
		return c.sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// giveUp builds the final error from the last attempt.
func (r attemptResult) giveUp(ctx context.Context, key string, attempts int) error {
	e := &RetryError{Key: key, Attempts: attempts, Err: r.err}
	if r.resp != nil {
		e.StatusCode = r.resp.StatusCode
		e.Problem = r.problem
	}
	switch {
	case r.fatal:
		return r.err
	case e.Err == nil && ctx.Err() != nil:
		e.Err = ctx.Err()
	case e.Err == nil:
		e.Err = ErrAttemptsExhausted
	case ctx.Err() != nil && !errors.Is(e.Err, ctx.Err()):
		e.Err = errors.Join(e.Err, ctx.Err())
	}
	return e
}
