package testbin

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// pollInterval is how often PollStatus asks again: a process listening is
// observable only by connecting.
const pollInterval = 25 * time.Millisecond

// PollStatus polls url until it answers want, ctx expires, or exited closes
// (nil: never).
func PollStatus(ctx context.Context, url string, want int, exited <-chan struct{}) error {
	c := &http.Client{Timeout: time.Second}
	defer c.CloseIdleConnections()
	var last string
	for {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-exited:
			return fmt.Errorf("process exited (last: %s)", last)
		case <-ctx.Done():
			return fmt.Errorf("no %d within the deadline (last: %s)", want, last)
		case <-time.After(pollInterval):
		}
	}
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
