// Package redistest starts real redis-server processes for tests: a
// standalone server, a Cluster (of masters, or with a replica each), or a
// master with a replica watched by one Sentinel or several. Every process
// listens on a free loopback port, keeps its files in a test temp dir, is
// killed by PID in t.Cleanup and dies with the test binary. A failed test
// gets each server's log printed with t.Log.
//
//	srv := redistest.Start(t)                 // standalone
//	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
//	srv.Kill(); srv.Restart()                 // fault injection, same port
//	cl := redistest.StartCluster(t, 3)        // cl.Addrs(); WithReplicas() adds one per master
//	sn := redistest.StartSentinel(t)          // sn.MasterName(), sn.SentinelAddrs(), sn.Failover(t)
//	sn = redistest.StartSentinel(t, redistest.WithSentinels(3)) // quorum 2; sn.WatchSwitches(t) reports +switch-master
//
// Without redis-server on PATH the tests are skipped, unless the CI
// environment variable is set: CI must never skip them silently.
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// readyTimeout bounds how long a fresh process may take to answer PING.
const readyTimeout = 10 * time.Second

// Binary returns the path of redis-server. It skips the test when the binary
// is missing, or fails it when the CI environment variable is set.
func Binary(t testing.TB) string {
	t.Helper()
	return lookBinary(t, "redis-server")
}

func lookBinary(t testing.TB, name string) string {
	t.Helper()
	return testbin.Tool(t, name, "")
}

// Server is one redis-server (or sentinel) process. Its methods are safe for
// concurrent use.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	argv []string

	mu   sync.Mutex
	proc *testbin.Process // nil before the first launch
}

// Start runs a standalone redis-server with persistence disabled; args are
// appended to its command line (e.g. "--maxmemory", "1mb"). It returns once
// the server answers PING.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	base := []string{"--save", "", "--appendonly", "no"}
	return startServer(t, nil, append(base, args...))
}

// startServer runs redis-server with pre (a config file, a mode flag) first,
// then the per-instance network and file options, then extra.
func startServer(t testing.TB, pre, extra []string) *Server {
	t.Helper()
	s := &Server{t: t, bin: Binary(t), dir: t.TempDir(), port: FreePort(t)}
	s.argv = append(append([]string{}, pre...),
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--logfile", s.logPath())
	s.argv = append(s.argv, extra...)
	t.Cleanup(func() {
		s.Kill()
		if t.Failed() {
			s.dumpLog()
		}
	})
	s.launch()
	return s
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL is a redis:// URL for database 0 of the server.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Port is the TCP port of the server.
func (s *Server) Port() int { return s.port }

// Dir is the server's working directory.
func (s *Server) Dir() string { return s.dir }

// PID is the process id, or 0 when the process is not running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running() {
		return 0
	}
	return s.proc.PID()
}

// Client returns a client for assertions, closed in t.Cleanup.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill sends SIGKILL and waits for the process to exit. It is a no-op when
// the process is not running.
func (s *Server) Kill() { s.signal(syscall.SIGKILL) }

// Stop asks the server to shut down (SIGTERM) and waits for it to exit,
// killing it if it takes longer than a few seconds.
func (s *Server) Stop() { s.signal(syscall.SIGTERM) }

// Pause freezes the process (SIGSTOP): it keeps its connections open but
// answers nothing, like a hung server. It returns once the kernel reports
// the process stopped, so that nothing the caller sends next can reach a
// server still running (a replica acknowledging a write, say). Resume
// undoes it; Kill works on a paused server.
func (s *Server) Pause() { s.send(syscall.SIGSTOP, true) }

// Resume continues a paused process (SIGCONT) and returns once the kernel
// reports it running again.
func (s *Server) Resume() { s.send(syscall.SIGCONT, false) }

func (s *Server) send(sig syscall.Signal, stopped bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running() {
		return
	}
	_ = s.proc.Signal(sig)
	// Errorf, not Fatalf: Pause and Resume may be called from a subtest's
	// goroutine or a cleanup, where s.t may not stop.
	if err := awaitStopped(s.proc, stopped); err != nil {
		s.t.Errorf("redis-server %s after %v: %v", s.Addr(), sig, err)
	}
}

// awaitStopped waits until p's state (the third field of /proc/PID/stat)
// is stopped ('T'), or is not, as asked. Without /proc (not Linux) it
// returns at once: the signal is sent, its effect is not awaited.
func awaitStopped(p *testbin.Process, stopped bool) error {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return nil
	}
	path := "/proc/" + strconv.Itoa(p.PID()) + "/stat"
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	return wait.Eventually(ctx, func() error {
		stat, err := os.ReadFile(path)
		if err != nil {
			if !p.Running() {
				return nil // exited: nothing left to wait for
			}
			return err
		}
		// "pid (comm) state ...": comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) {
			return fmt.Errorf("unreadable %s: %q", path, stat)
		}
		if state := stat[i+2]; (state == 'T') != stopped {
			return fmt.Errorf("process state %q", state)
		}
		return nil
	})
}

// Restart stops the process if it runs, then starts it again with the same
// port, directory and arguments, and waits until it answers PING.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	s.launch()
}

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running() {
		s.proc.Stop(sig, 5*time.Second)
	}
}

// running reports whether the process runs; s.mu is held.
func (s *Server) running() bool { return s.proc != nil && s.proc.Running() }

func (s *Server) launch() {
	s.t.Helper()
	s.mu.Lock()
	proc, err := testbin.Launch(testbin.Command{Path: s.bin, Args: s.argv, Dir: s.dir}, &testbin.Buffer{})
	if err != nil {
		s.mu.Unlock()
		s.t.Fatal(err)
	}
	s.proc = proc
	s.mu.Unlock()

	if err := waitPing(proc, s.Addr(), readyTimeout); err != nil {
		s.dumpLog()
		s.t.Fatalf("redis-server on %s not ready: %v", s.Addr(), err)
	}
}

func (s *Server) logPath() string { return filepath.Join(s.dir, "redis.log") }

// dumpLog prints the tail of the server log: enough to see why it failed.
func (s *Server) dumpLog() { testbin.LogTail(s.t, "redis-server "+s.Addr(), s.logPath()) }

// waitPing polls addr with a raw PING until it answers +PONG (or NOAUTH,
// for a server started with a password), the process exits, or the timeout
// passes.
func waitPing(p *testbin.Process, addr string, timeout time.Duration) error {
	return p.Ready(timeout, func() error {
		reply, err := rawCommand(addr, "PING")
		if err == nil && (reply == "+PONG" || strings.HasPrefix(reply, "-NOAUTH")) {
			return nil
		}
		return fmt.Errorf("reply %q: %v", reply, err)
	})
}

// rawCommand sends one inline command and returns the first reply line.
// Using a bare connection keeps readiness checks free of client retries.
func rawCommand(addr, cmd string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := conn.Write([]byte(cmd + "\r\n")); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

// maxPort keeps port+10000 (the Cluster bus port) a valid port number.
const maxPort = 55535

// FreePort returns a loopback TCP port that was free a moment ago, with
// port+10000 free too so that the port also suits a Cluster node.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen on loopback: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port >= maxPort || !portFree(port+10000) {
			continue
		}
		return port
	}
	t.Fatal("no free loopback port pair found in 100 attempts")
	return 0
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// CountKeys counts the keys of s that match the SCAN pattern, such as
// "idem:{*}": the store's leases and records without its epoch marker.
func (s *Server) CountKeys(t testing.TB, pattern string) int {
	t.Helper()
	keys, err := s.Client(t).Keys(context.Background(), pattern).Result()
	if err != nil {
		t.Fatalf("KEYS %s on %s: %v", pattern, s.Addr(), err)
	}
	return len(keys)
}
