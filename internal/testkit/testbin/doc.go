// Package testbin is the harness of the tests that run real processes: the
// idempotency-proxy binary and the demo upstream, built once per test binary
// with go build, started on free loopback ports, stopped by PID.
//
//	func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }
//
//	bin := testbin.Proxy.Path(t)              // built on first use
//	p := testbin.Start(t, testbin.Command{Path: bin, Args: args})
//	p.Signal(syscall.SIGTERM); code, ok := p.Wait(10 * time.Second)
//
// A process started here is SIGKILLed in t.Cleanup, dies with the test
// binary (Linux), and has its output printed when the test failed.
package testbin
