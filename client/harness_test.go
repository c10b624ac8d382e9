package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"
)

// errLost stands in for a connection that broke after the server answered.
var errLost = errors.New("connection reset (test)")

// recordingTransport records every attempt's key and status (0 for a
// transport error), tracks whether response bodies get closed, and can
// throw away the first responses to simulate answers lost on the way back.
type recordingTransport struct {
	base http.RoundTripper
	// lose is how many responses, from the first, are discarded and replaced
	// by errLost after the server produced them.
	lose int

	mu       sync.Mutex
	keys     []string
	statuses []int
	bodies   []*trackedBody
}

func (rt *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := rt.base.RoundTrip(r)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.keys = append(rt.keys, r.Header.Get(HeaderKey))
	if err == nil && rt.lose > 0 {
		rt.lose--
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		resp, err = nil, errLost
	}
	if err != nil {
		rt.statuses = append(rt.statuses, 0)
		return nil, err
	}
	rt.statuses = append(rt.statuses, resp.StatusCode)
	tb := &trackedBody{ReadCloser: resp.Body}
	rt.bodies = append(rt.bodies, tb)
	resp.Body = tb
	return resp, nil
}

func (rt *recordingTransport) gotStatuses() []int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return append([]int(nil), rt.statuses...)
}

func (rt *recordingTransport) gotKeys() []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return append([]string(nil), rt.keys...)
}

// assertRetriedBodiesClosed checks that every response but the last one was
// closed by the client.
func (rt *recordingTransport) assertRetriedBodiesClosed(t *testing.T) {
	t.Helper()
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for i, b := range rt.bodies[:max(len(rt.bodies)-1, 0)] {
		if !b.isClosed() {
			t.Errorf("body of retried response %d not closed", i)
		}
	}
}

type trackedBody struct {
	io.ReadCloser
	mu     sync.Mutex
	closed bool
}

func (b *trackedBody) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return b.ReadCloser.Close()
}

func (b *trackedBody) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// sleepRecorder replaces the client's wait: it records each delay and
// returns at once (or when ctx is done), so tests do not really wait.
type sleepRecorder struct {
	mu     sync.Mutex
	delays []time.Duration
	// hook, if set, runs before returning and may wait briefly itself.
	hook func(ctx context.Context, d time.Duration) error
}

func (s *sleepRecorder) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.delays = append(s.delays, d)
	s.mu.Unlock()
	if s.hook != nil {
		return s.hook(ctx, d)
	}
	return ctx.Err()
}

func (s *sleepRecorder) gotDelays() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.delays...)
}

// newTestClient returns a client whose attempts go through a recording
// transport and whose waits are recorded, not slept.
func newTestClient(lose int) (*Client, *recordingTransport, *sleepRecorder) {
	rt := &recordingTransport{base: http.DefaultTransport, lose: lose}
	sr := &sleepRecorder{}
	c := &Client{
		HTTP:        &http.Client{Transport: rt},
		MaxAttempts: 6,
		BaseDelay:   time.Millisecond,
		MaxDelay:    30 * time.Second,
		sleep:       sr.sleep,
	}
	return c, rt, sr
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading response body: %v", err)
	}
	return string(b)
}
