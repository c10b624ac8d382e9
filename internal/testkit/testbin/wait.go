package testbin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// PollStatus polls url until it answers want, ctx expires, or exited closes
// (nil: never).
func PollStatus(ctx context.Context, url string, want int, exited <-chan struct{}) error {
	c := &http.Client{Timeout: time.Second}
	defer c.CloseIdleConnections()
	ctx, cancel := untilExit(ctx, exited)
	defer cancel()
	err := wait.Eventually(ctx, func() error {
		resp, err := c.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			return fmt.Errorf("%s, want %d", resp.Status, want)
		}
		return nil
	})
	if err != nil && ctx.Err() != nil && context.Cause(ctx) != errExited {
		return fmt.Errorf("no %d within the deadline: %w", want, err)
	}
	return err
}

var errExited = errors.New("process exited")

// untilExit is ctx, also done, with errExited as its cause, once exited
// closes (nil: never).
func untilExit(ctx context.Context, exited <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-exited:
			cancel(errExited)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(nil) }
}

// Ready polls ready until it returns nil, failing when the process exits
// first or within passes, with ready's last error: how a test waits for a
// server it started to answer.
func (p *Process) Ready(within time.Duration, ready func() error) error {
	ctx, cancel := context.WithTimeoutCause(context.Background(), within, fmt.Errorf("not within %s", within))
	defer cancel()
	ctx, stop := untilExit(ctx, p.done)
	defer stop()
	return wait.Eventually(ctx, ready)
}

// WaitReady waits up to timeout for p to answer 200 on every url in turn;
// it fails early if p exits.
func (p *Process) WaitReady(timeout time.Duration, urls ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, u := range urls {
		if err := PollStatus(ctx, u, http.StatusOK, p.done); err != nil {
			return fmt.Errorf("%s: %w", u, err)
		}
	}
	return nil
}

// WaitOutput waits until read() (a process's stderr or log, read again
// each time) contains substr, for at most within; it fails tb at once when
// p exits without it.
func WaitOutput(tb testing.TB, p *Process, read func() string, substr string, within time.Duration) {
	tb.Helper()
	wait.SucceedsSoon(tb, within, func() error {
		out := read()
		switch {
		case strings.Contains(out, substr):
			return nil
		case !p.Running():
			tb.Fatalf("the process exited with no %q in the output:\n%s", substr, out)
		}
		return fmt.Errorf("no %q in the output:\n%s", substr, out)
	})
}
