package testbin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// FreeAddr returns a loopback host:port that was free a moment ago. Another
// process may take it before it is bound: callers that can, retry on a new
// one (see Start's callers).
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen on loopback: %v", err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// Command is a process to run.
type Command struct {
	Path   string    // the executable, e.g. Proxy.Path(t)
	Args   []string  // arguments, without the program name
	Env    []string  // added to the test's own environment
	Stdout io.Writer // where standard output goes; nil discards it
	Dir    string    // the working directory; "" is the test's
}

// Process is one running (or exited) process. Methods are safe for
// concurrent use.
type Process struct {
	name   string
	cmd    *exec.Cmd
	stderr *Buffer
	done   chan struct{} // closed once the process has exited
	code   int           // exit status, set before done is closed
}

// Launch starts c, its standard error going to stderr. Nothing stops it on
// its own: the caller kills it (Start registers that with the test).
func Launch(c Command, stderr *Buffer) (*Process, error) {
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Env = append(os.Environ(), c.Env...)
	cmd.Stdout = c.Stdout
	cmd.Stderr = stderr
	cmd.Dir = c.Dir
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", c.Path, err)
	}
	return watch(cmd, stderr), nil
}

// Watch is the Process of cmd, which its caller built and started (with
// attributes a Command does not have, such as another user's credential);
// its standard error is the caller's, and Stderr is empty.
func Watch(cmd *exec.Cmd) *Process { return watch(cmd, &Buffer{}) }

func watch(cmd *exec.Cmd, stderr *Buffer) *Process {
	p := &Process{name: filepath.Base(cmd.Path), cmd: cmd, stderr: stderr, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			p.code = ee.ExitCode()
		}
		close(p.done)
	}()
	return p
}

// Start launches c for the duration of the test: it is SIGKILLed in
// t.Cleanup, and its standard error is logged if the test failed.
func Start(tb testing.TB, c Command) *Process {
	tb.Helper()
	p, err := Launch(c, &Buffer{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		p.Kill()
		if tb.Failed() {
			tb.Logf("%s stderr:\n%s", p.name, p.Stderr())
		}
	})
	return p
}

// PID is the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited is closed once the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.done }

// Running reports whether the process has not exited yet.
func (p *Process) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Stderr is everything the process wrote on standard error so far.
func (p *Process) Stderr() string { return p.stderr.String() }

// StderrBuffer is the buffer standard error goes to, for tests that read
// it as it grows.
func (p *Process) StderrBuffer() *Buffer { return p.stderr }

// Kill sends SIGKILL and waits for the exit; a no-op once exited.
func (p *Process) Kill() {
	if p.Running() {
		_ = p.cmd.Process.Kill()
	}
	<-p.done
}

// Stop sends sig, waits up to within for the exit, and kills the process
// if it is still running then; a no-op once exited.
func (p *Process) Stop(sig syscall.Signal, within time.Duration) {
	if p.Signal(sig) != nil {
		return
	}
	if _, ok := p.Wait(within); !ok {
		p.Kill()
	}
}

// LogTail logs the last 8 KiB of a server's log file, what of it is
// enough to see why the server failed; what names the server.
func LogTail(tb testing.TB, what, path string) {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Logf("%s: no log: %v", what, err)
		return
	}
	const max = 8 << 10
	if len(b) > max {
		b = b[len(b)-max:]
	}
	tb.Logf("%s log (tail):\n%s", what, b)
}

// Signal sends sig unless the process has exited.
func (p *Process) Signal(sig syscall.Signal) error {
	if !p.Running() {
		return errors.New(p.name + " has exited")
	}
	return p.cmd.Process.Signal(sig)
}

// Wait waits up to timeout for the exit and returns the exit status; ok is
// false on timeout.
func (p *Process) Wait(timeout time.Duration) (code int, ok bool) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return p.code, true
	case <-t.C:
		return 0, false
	}
}

// Buffer collects a process's output; safe for the process's writers and
// the test's readers.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Tool returns the path of the program name (on PATH, or a path). A
// missing program skips the test, or fails it when the CI environment
// variable is set: CI installs every program a test needs (.ci/run) and
// must never pass by skipping one. hint says how to install it, "" for
// nothing to add.
func Tool(tb testing.TB, name, hint string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if hint != "" {
		hint = "; " + hint
	}
	if os.Getenv("CI") != "" {
		tb.Fatalf("%s not installed (required when CI is set%s): %v", name, hint, err)
	}
	tb.Skipf("%s not installed%s: %v", name, hint, err)
	return ""
}
