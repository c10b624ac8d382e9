package client

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// accepted reports whether resp is the proxy's 202 under Prefer:
// respond-async to a request for origin: the operation runs, and Location
// says where its answer will be. The proxy serves its status URLs on the
// origin the request was sent to; a Location on another origin (a redirect's
// included, which http.Client followed without Authorization) is not one of
// them, and polling it would hand the request's headers to that origin.
func accepted(resp *http.Response, origin *url.URL) bool {
	if resp == nil || resp.StatusCode != http.StatusAccepted ||
		!strings.Contains(strings.ToLower(resp.Header.Get("Preference-Applied")), "respond-async") {
		return false
	}
	loc := resp.Header.Get("Location")
	if loc == "" || resp.Request == nil || resp.Request.URL == nil {
		return false
	}
	u, err := resp.Request.URL.Parse(loc)
	return err == nil && strings.EqualFold(u.Scheme, origin.Scheme) && strings.EqualFold(u.Host, origin.Host)
}

// follow polls the status URL of a 202 until the operation's answer,
// which it returns as Do returns an attempt's: each poll waits for the
// last 202's Retry-After, capped by MaxDelay, and a poll that fails in a
// way worth retrying (a transport error, a 503) is retried the same way.
// At most MaxPolls polls are sent. An answer marked released (Released)
// that says to retry is returned as released instead: the key is free,
// and Do sends the request again with it.
func (c *Client) follow(ctx context.Context, req *http.Request, key string, resp *http.Response) (_ *http.Response, released *attemptResult, _ error) {
	loc, _ := resp.Request.URL.Parse(resp.Header.Get("Location")) // accepted parsed it
	last := attemptResult{resp: resp}
	last.retryAfter, last.hasRetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), c.clock())
	drainAndClose(resp)
	maxPolls := c.MaxPolls
	if maxPolls <= 0 {
		maxPolls = DefaultMaxPolls
	}
	for n := 1; ; n++ {
		d := c.delay(n, last)
		if c.OnRetry != nil {
			c.OnRetry(last.retryInfo(n, d))
		}
		if c.wait(ctx, d) != nil {
			return nil, nil, last.giveUp(ctx, key, n)
		}
		last = c.poll(ctx, req, loc.String())
		switch {
		case accepted(last.resp, req.URL):
			last.retryAfter, last.hasRetryAfter = parseRetryAfter(last.resp.Header.Get("Retry-After"), c.clock())
			drainAndClose(last.resp)
		case last.final():
			resp, err := last.deliver(key)
			return resp, nil, err
		case last.resp != nil && Released(last.resp):
			return nil, &last, nil
		}
		if n == maxPolls || ctx.Err() != nil {
			return nil, nil, last.giveUp(ctx, key, n)
		}
	}
}

// poll GETs the status URL loc with req's headers: the proxy answers only
// a poll that carries the original's scope headers (Authorization, ...).
func (c *Client) poll(ctx context.Context, req *http.Request, loc string) attemptResult {
	actx, cancel := ctx, context.CancelFunc(func() {})
	if c.AttemptTimeout > 0 {
		actx, cancel = context.WithTimeout(ctx, c.AttemptTimeout)
	}
	r, err := http.NewRequestWithContext(actx, http.MethodGet, loc, nil)
	if err != nil {
		cancel()
		return attemptResult{err: err, fatal: true}
	}
	r.Header = req.Header.Clone()
	for _, h := range []string{"Content-Type", "Content-Length", "Content-Encoding", "Prefer", HeaderKey} {
		r.Header.Del(h)
	}
	return c.exchange(r, cancel)
}

// clock is the time now, through the test seam.
func (c *Client) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}
