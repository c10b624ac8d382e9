package e2e

import (
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// problemBase prefixes the type URI of every problem the proxy answers itself.
const problemBase = "https://idempotency-proxy.dev/problems/"

// request is one request a test client sends through a proxy.
type request struct {
	Method string // default POST
	Path   string // default /v1/orders
	Key    string // sent raw as Idempotency-Key when not empty
	Body   string
	Header map[string]string
}

// reply is what the client got back.
type reply struct {
	Status int
	Header http.Header
	Body   string
	Err    error
	At     time.Time // when the request was sent
	Took   time.Duration
	Base   string // the proxy it was sent to
}

// Problem is the type URI suffix of a proxy problem response ("in-flight"),
// or "" when the reply is not one of the proxy's problems.
func (r reply) Problem() string {
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json") {
		return ""
	}
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal([]byte(r.Body), &p) != nil {
		return ""
	}
	return strings.TrimPrefix(p.Type, problemBase)
}

// Replayed reports whether the proxy marked the reply as a replay.
func (r reply) Replayed() bool { return r.Header.Get("Idempotent-Replayed") == "true" }

func (r reply) String() string {
	if r.Err != nil {
		return "error: " + r.Err.Error()
	}
	s := strconv.Itoa(r.Status)
	if p := r.Problem(); p != "" {
		s += " " + p
	}
	if r.Replayed() {
		s += " (replayed)"
	}
	return s
}

// newClient returns an HTTP client closed at the end of the test.
func newClient(t testing.TB, timeout time.Duration) *http.Client {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: timeout}
}

// send sends rq to the proxy at base.
func send(ctx context.Context, c *http.Client, base string, rq request) reply {
	method, path := rq.Method, rq.Path
	if method == "" {
		method = http.MethodPost
	}
	if path == "" {
		path = "/v1/orders"
	}
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(rq.Body))
	if err != nil {
		return reply{Err: err, At: start, Base: base}
	}
	req.Header.Set("Content-Type", "application/json")
	if rq.Key != "" {
		// Under a non-canonical map key, so that net/http's Transport does
		// not treat the request as safe to resend on a broken keep-alive
		// connection (golang/go#19943): a silent resend would turn "sent,
		// then cut" into a "connection refused" the chaos checker reads as
		// "never sent". The wire form is the same.
		req.Header["idempotency-key"] = []string{rq.Key}
	}
	for k, v := range rq.Header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return reply{Err: err, At: start, Took: time.Since(start), Base: base}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: string(body), Err: err,
		At: start, Took: time.Since(start), Base: base}
}

// mustSend sends rq and fails the test on a transport error.
func mustSend(t testing.TB, c *http.Client, base string, rq request) reply {
	t.Helper()
	r := send(context.Background(), c, base, rq)
	if r.Err != nil {
		t.Fatalf("%s %s key %q: %v", rq.Method, base+rq.Path, rq.Key, r.Err)
	}
	return r
}

// retrier resends a request with the same key the way a careful client
// does: on 409, 503, 502, 504 and transport errors, honouring Retry-After (capped
// so tests stay short) or backing off exponentially with jitter, rotating
// over the proxy replicas, and giving up after MaxAttempts.
type retrier struct {
	Client      *http.Client
	Bases       []string // proxy replicas, tried in turn
	MaxAttempts int
	MaxWait     time.Duration // cap on one wait
	Rand        *rand.Rand    // jitter; not safe for concurrent use
}

// retryable reports whether a real client would try again: a 504
// upstream-timeout too, whose call goes on and whose retry gets its answer.
func retryable(r reply) bool {
	if r.Err != nil {
		return true
	}
	switch r.Status {
	case http.StatusConflict, http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// Do sends rq until it gets a final answer or runs out of attempts; it
// returns every reply, the last one being the outcome.
func (rt retrier) Do(ctx context.Context, rq request) []reply {
	var got []reply
	backoff := 20 * time.Millisecond
	for attempt := 0; attempt < rt.MaxAttempts && ctx.Err() == nil; attempt++ {
		r := send(ctx, rt.Client, rt.Bases[attempt%len(rt.Bases)], rq)
		got = append(got, r)
		if !retryable(r) {
			break
		}
		wait := backoff + time.Duration(rt.Rand.Int64N(int64(backoff)))
		backoff = min(2*backoff, rt.MaxWait)
		if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err == nil && r.Err == nil {
			wait = time.Duration(s) * time.Second
		}
		select {
		case <-time.After(min(wait, rt.MaxWait)):
		case <-ctx.Done():
		}
	}
	return got
}
