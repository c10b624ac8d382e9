// Package wait is the one way a test waits for what it cannot be told: a
// condition tried again, with a short pause at first and backing off,
// until it holds or a bound passes, the failure naming the bound and the
// condition's last error.
//
//	wait.SucceedsSoon(t, 10*time.Second, func() error {
//		if !p.Running() {
//			return errors.New("not running yet")
//		}
//		return nil
//	})
//
// A channel, a returned call or an injected clock is always better; use it
// for another process's state, a metric, a log line.
package wait

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Pauses between two tries of a condition: short at first, so a condition
// that holds soon is seen soon, then backing off, so a slow one does not
// load a busy machine.
const (
	firstPause = 5 * time.Millisecond
	maxPause   = 100 * time.Millisecond
)

// Eventually calls cond until it returns nil, or until ctx is done: it then
// returns cond's last error, after the context's cause. Use it where no
// signal can be awaited (another process's state, a metric, a log line);
// a channel or a returned call is always better.
func Eventually(ctx context.Context, cond func() error) error {
	pause := firstPause
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", context.Cause(ctx), err)
		case <-time.After(pause):
		}
		pause = min(2*pause, maxPause)
	}
}

// SucceedsSoon fails t unless cond returns nil within the bound, giving
// cond's last error: the one way a test waits for what it cannot be told.
func SucceedsSoon(t testing.TB, within time.Duration, cond func() error) {
	t.Helper()
	if err := SoonError(within, cond); err != nil {
		t.Fatal(err)
	}
}

// SoonError is SucceedsSoon for a caller that handles the failure itself
// (a goroutine, a cleanup that reports rather than stops): the error names
// the bound and cond's last error.
func SoonError(within time.Duration, cond func() error) error {
	ctx, cancel := context.WithTimeoutCause(context.Background(), within, fmt.Errorf("not within %s", within))
	defer cancel()
	return Eventually(ctx, cond)
}

// Throughout calls cond, with the same pauses, until within has passed, and
// returns its first error: the way a test checks that something stays so
// for a while (a key still refused, nothing forwarded) where no event marks
// the end. The error names how long the condition held.
func Throughout(within time.Duration, cond func() error) error {
	start := time.Now()
	pause := firstPause
	for {
		if err := cond(); err != nil {
			return fmt.Errorf("after %s of %s: %w", time.Since(start).Round(time.Millisecond), within, err)
		}
		left := within - time.Since(start)
		if left <= 0 {
			return nil
		}
		time.Sleep(min(pause, left)) // the condition is read again: nothing signals a change
		pause = min(2*pause, maxPause)
	}
}
