package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
)

// readyTimeout bounds how long a proxy may take to serve /healthz and
// /readyz after it was started.
const readyTimeout = 15 * time.Second

// proxyProc is one idempotency-proxy process. It keeps its ports and config
// across restarts, so a replica can come back where clients expect it.
// Methods are safe for concurrent use.
type proxyProc struct {
	t      testing.TB
	name   string
	config string // path of the YAML file
	listen string // host:port of the proxy listener
	admin  string // host:port of the admin listener
	env    []string
	stderr *testbin.Buffer

	mu   sync.Mutex
	proc *testbin.Process // the current run; nil before the first
}

// startProxy writes cfg to a file and runs the binary with it on two free
// loopback ports, returning once /healthz and /readyz answer 200. The
// process is SIGKILLed in t.Cleanup; its stderr is printed if the test failed.
func startProxy(t testing.TB, name string, cfg proxyConfig) *proxyProc {
	t.Helper()
	p := &proxyProc{t: t, name: name, env: cfg.Env, stderr: &testbin.Buffer{}}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("proxy %s stderr:\n%s", p.name, p.stderr.String())
		}
	})
	// A free port may be taken between probing and binding; try again on
	// new ports a few times before failing.
	var err error
	for range 3 {
		p.listen, p.admin = freeAddr(t), freeAddr(t)
		p.config = filepath.Join(t.TempDir(), name+".yaml")
		if err = os.WriteFile(p.config, []byte(cfg.yaml(p.listen, p.admin)), 0o600); err != nil {
			t.Fatalf("write config: %v", err)
		}
		if err = p.launch(); err == nil {
			return p
		}
	}
	t.Fatalf("proxy %s did not start: %v\nstderr:\n%s", name, err, p.stderr.String())
	return nil
}

// URL is the base URL of the proxy listener.
func (p *proxyProc) URL() string { return "http://" + p.listen }

// AdminURL is the base URL of the admin listener.
func (p *proxyProc) AdminURL() string { return "http://" + p.admin }

// Logs is everything the process wrote on stderr, across restarts.
func (p *proxyProc) Logs() string { return p.stderr.String() }

func (p *proxyProc) launch() error {
	proc, err := testbin.Launch(testbin.Command{Path: proxyBin, Args: []string{"--config", p.config}, Env: p.env, Stdout: p.stderr}, p.stderr)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.proc = proc
	p.mu.Unlock()
	if err := proc.WaitReady(readyTimeout, p.AdminURL()+"/healthz", p.AdminURL()+"/readyz"); err != nil {
		proc.Kill()
		return err
	}
	return nil
}

func (p *proxyProc) current() *testbin.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.proc
}

// Restart starts the process again on the same ports with the same config
// (after a Kill or Term), and waits until it is ready.
func (p *proxyProc) Restart() {
	p.t.Helper()
	p.Kill()
	if err := p.launch(); err != nil {
		p.t.Fatalf("restart proxy %s: %v\nstderr:\n%s", p.name, err, p.stderr.String())
	}
}

// PID is the process id, or 0 when it is not running.
func (p *proxyProc) PID() int {
	proc := p.current()
	if proc == nil || !proc.Running() {
		return 0
	}
	return proc.PID()
}

// Kill sends SIGKILL and waits for the exit; a no-op when not running.
func (p *proxyProc) Kill() {
	if proc := p.current(); proc != nil {
		proc.Kill()
	}
}

// Signal sends sig without waiting.
func (p *proxyProc) Signal(sig syscall.Signal) {
	if proc := p.current(); proc != nil {
		_ = proc.Signal(sig)
	}
}

// Wait waits up to timeout for the process to exit and returns its exit
// code; ok is false on timeout.
func (p *proxyProc) Wait(timeout time.Duration) (code int, ok bool) {
	proc := p.current()
	if proc == nil {
		return 0, false
	}
	return proc.Wait(timeout)
}

// pollStatus polls url until it answers want, ctx expires, or exited closes.
var pollStatus = testbin.PollStatus

// waitStatus fails the test unless url answers want within timeout.
func waitStatus(t testing.TB, url string, want int, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := pollStatus(ctx, url, want, nil); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// freeAddr returns a loopback host:port that was free a moment ago.
var freeAddr = testbin.FreeAddr

// logLines returns the JSON log lines of p whose attributes include every
// one of want (compared as strings).
func (p *proxyProc) logLines(want map[string]string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(p.Logs(), "\n") {
		var attrs map[string]any
		if json.Unmarshal([]byte(line), &attrs) != nil {
			continue
		}
		match := true
		for k, v := range want {
			if fmt.Sprint(attrs[k]) != v {
				match = false
				break
			}
		}
		if match {
			out = append(out, attrs)
		}
	}
	return out
}
