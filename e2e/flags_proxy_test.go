package e2e

import (
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
)

// flagsProxy is an idempotency-proxy started from flags alone, as a
// newcomer runs it: in-memory store, no configuration file.
type flagsProxy struct {
	*testbin.Process
	listen string // host:port of the proxy listener
	admin  string // host:port of the admin listener
}

// startFlagsProxy runs the binary with args plus free listener addresses
// and returns once /healthz answers. It is SIGKILLed in t.Cleanup.
func startFlagsProxy(t *testing.T, args ...string) *flagsProxy {
	t.Helper()
	p := &flagsProxy{listen: freeAddr(t), admin: freeAddr(t)}
	args = append(args, "--listen", p.listen, "--admin-listen", p.admin)
	p.Process = testbin.Start(t, testbin.Command{Path: proxyBin, Args: args})
	if err := p.WaitReady(readyTimeout, "http://"+p.admin+"/healthz"); err != nil {
		t.Fatalf("the proxy did not start: %v\n%s", err, p.Stderr())
	}
	return p
}

// waitOutput waits until read() contains substr; a log is observable only
// by reading it again.
func waitOutput(t *testing.T, p *testbin.Process, read func() string, substr string) {
	t.Helper()
	testbin.WaitOutput(t, p, read, substr, readyTimeout)
}
