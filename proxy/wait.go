package proxy

import (
	"context"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution"
)

// Polling bounds for keys owned elsewhere: quick at first, for the common
// short request, then backing off to spare the store.
const (
	firstPoll = 5 * time.Millisecond
	maxPoll   = 200 * time.Millisecond
)

// waiter paces one request's waits for an in-flight key.
type waiter struct {
	deadline time.Time
	poll     time.Duration
}

// wait blocks until the key may have settled (done fires or the next poll
// is due). It returns false when the wait timeout has passed or the client
// went away. Its time is clk's, the handler's: a fake clock drives waits as
// it drives leases.
func (w *waiter) wait(ctx context.Context, clk execution.Clock, done <-chan struct{}, timeout time.Duration) bool {
	now := clk.Now()
	if w.deadline.IsZero() {
		w.deadline, w.poll = now.Add(timeout), firstPoll
	}
	left := w.deadline.Sub(now)
	if left <= 0 {
		return false
	}
	due := make(chan struct{})
	t := clk.AfterFunc(min(w.poll, left), func() { close(due) })
	defer t.Stop()
	w.poll = min(2*w.poll, maxPoll)
	select {
	case <-done:
	case <-due:
	case <-ctx.Done():
		return false
	}
	return true
}
