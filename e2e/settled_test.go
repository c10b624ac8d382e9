package e2e

import (
	"bytes"
	"fmt"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// The waits after a run: the clients have stopped, and what they started
// must come to rest.

// waitIdle waits until no replica has a request in flight.
func waitIdle(t *testing.T, ps []*proxyProc) {
	t.Helper()
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if n := metricSum(t, "idempotency_proxy_inflight_requests", nil, ps...); n > 0 {
			return fmt.Errorf("%v requests still in flight after the clients stopped", n)
		}
		return nil
	})
}

// waitNoneDetached waits until no replica has a call going on after its
// client's 504.
func waitNoneDetached(t *testing.T, ps []*proxyProc) {
	t.Helper()
	wait.SucceedsSoon(t, chaosMaxExecution+5*time.Second, func() error {
		if n := metricSum(t, "idempotency_proxy_detached_requests", nil, ps...); n > 0 {
			return fmt.Errorf("%v calls still detached after the clients stopped", n)
		}
		return nil
	})
}

// checkGoroutines waits until the goroutine count is back near base, and
// dumps every stack if it does not get there.
func checkGoroutines(t *testing.T, base int) {
	t.Helper()
	const slack = 3
	err := wait.SoonError(5*time.Second, func() error {
		if n := runtime.NumGoroutine(); n > base+slack {
			return fmt.Errorf("%d goroutines after the run, %d before", n, base)
		}
		return nil
	})
	if err != nil {
		var b bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Errorf("%v:\n%s", err, b.String())
	}
}
