package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
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
	stderr *lockedBuffer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	code int           // exit code once done is closed
}

// startProxy writes cfg to a file and runs the binary with it on two free
// loopback ports, returning once /healthz and /readyz answer 200. The
// process is SIGKILLed in t.Cleanup; its stderr is printed if the test failed.
func startProxy(t testing.TB, name string, cfg proxyConfig) *proxyProc {
	t.Helper()
	p := &proxyProc{t: t, name: name, stderr: &lockedBuffer{}}
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
	p.mu.Lock()
	cmd := exec.Command(proxyBin, "--config", p.config)
	cmd.Stdout = p.stderr
	cmd.Stderr = p.stderr
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		p.mu.Unlock()
		return fmt.Errorf("start: %w", err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() {
		err := cmd.Wait()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		p.mu.Lock()
		p.code = code
		p.mu.Unlock()
		close(done)
	}()
	p.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for _, path := range []string{"/healthz", "/readyz"} {
		if err := pollStatus(ctx, p.AdminURL()+path, http.StatusOK, done); err != nil {
			p.Kill()
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
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
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || isClosed(p.done) {
		return 0
	}
	return p.cmd.Process.Pid
}

// Kill sends SIGKILL and waits for the exit; a no-op when not running.
func (p *proxyProc) Kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || isClosed(done) {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Signal sends sig without waiting.
func (p *proxyProc) Signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isClosed(p.done) {
		_ = p.cmd.Process.Signal(sig)
	}
}

// Wait waits up to timeout for the process to exit and returns its exit
// code; ok is false on timeout.
func (p *proxyProc) Wait(timeout time.Duration) (code int, ok bool) {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.code, true
	case <-time.After(timeout):
		return 0, false
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// pollStatus polls url until it answers want, ctx expires, or exited closes.
func pollStatus(ctx context.Context, url string, want int, exited <-chan struct{}) error {
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
		case <-time.After(25 * time.Millisecond):
		}
	}
}

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
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen on loopback: %v", err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// lockedBuffer is a bytes.Buffer safe for the process's writers and the
// test's readers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
