//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// children starts the processes under test and kills every one of them, by
// PID, when the benchmark ends — normally, on an error or on a signal.
type children struct {
	dir    string // logs and the built proxy binary
	layout layout
	mu     sync.Mutex
	cmds   []*exec.Cmd
	logs   map[int]string // PID → log file
	// gentle are the children stopped with SIGINT first (postgres: its
	// backends exit with the postmaster), killed after stopTimeout.
	gentle map[int]bool
	dirs   []string // more directories to remove at the end (postgres's own)
	// wrap, when set, is a command every child runs under (valgrind and
	// its options, for --instructions); env is more of every child's
	// environment.
	wrap, env []string
	// stderrPipe (--stderr pipe) gives every child a pipe for its output,
	// which this process copies to its log file, as a log collector
	// reading a container's stderr would; else the log file is the
	// child's stderr itself. pipedLogs are closed once their children
	// are gone.
	stderrPipe bool
	pipedLogs  []*os.File
}

// stopTimeout bounds a child's own shutdown before it is killed.
const stopTimeout = 10 * time.Second

func newChildren(lay layout) (*children, error) {
	dir, err := os.MkdirTemp("", "loadbench-")
	if err != nil {
		return nil, err
	}
	return &children{dir: dir, layout: lay, logs: map[int]string{}, gentle: map[int]bool{}}, nil
}

// start launches name with args, its output in a log file, on the servers'
// CPU when the layout pins. The kernel kills it when this process dies
// (Pdeathsig), so even a SIGKILLed benchmark leaves nothing behind.
func (c *children) start(label, name string, args []string, env []string) (*exec.Cmd, error) {
	if len(c.wrap) > 0 {
		name, args = c.wrap[0], append(append(c.wrap[1:len(c.wrap):len(c.wrap)], name), args...)
	}
	cmd := exec.Command(name, args...)
	cmd.Env = append(append(os.Environ(), env...), c.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd, c.launch(label, cmd)
}

// launch starts a prepared command as start does; its SysProcAttr, which
// must set Pdeathsig, is its own.
func (c *children) launch(label string, cmd *exec.Cmd) error {
	logPath := filepath.Join(c.dir, label+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	if c.stderrPipe {
		// A writer that is not an *os.File makes exec copy the child's
		// output from a pipe, and cmd.Wait wait for the copy.
		out := struct{ io.Writer }{logFile}
		cmd.Stdout, cmd.Stderr = out, out
		c.mu.Lock()
		c.pipedLogs = append(c.pipedLogs, logFile)
		c.mu.Unlock()
	} else {
		defer logFile.Close()
		cmd.Stdout, cmd.Stderr = logFile, logFile
	}
	if c.layout.pinned() {
		err = startOn(cmd, c.layout.serverCPU)
	} else {
		err = cmd.Start()
	}
	if err != nil {
		return fmt.Errorf("start %s: %w", label, err)
	}
	c.mu.Lock()
	c.cmds = append(c.cmds, cmd)
	c.logs[cmd.Process.Pid] = logPath
	c.mu.Unlock()
	return nil
}

// killAll kills every child by PID and waits for it; it is safe to call twice.
func (c *children) killAll() {
	c.mu.Lock()
	cmds, dirs, logs := c.cmds, c.dirs, c.pipedLogs
	c.cmds, c.dirs, c.pipedLogs = nil, nil, nil
	c.mu.Unlock()
	defer func() {
		for _, f := range logs {
			_ = f.Close()
		}
	}()
	for _, cmd := range cmds {
		if c.gentle[cmd.Process.Pid] && cmd.Process.Signal(syscall.SIGINT) == nil {
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
				continue
			case <-time.After(stopTimeout):
			}
			_ = cmd.Process.Kill()
			<-done
			continue
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	for _, d := range append(dirs, c.dir) {
		_ = os.RemoveAll(d)
	}
}

// logTail returns the end of a child's log, for error messages.
func (c *children) logTail(pid int) string {
	c.mu.Lock()
	path := c.logs[pid]
	c.mu.Unlock()
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// freeAddr returns a loopback address nobody listens on right now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// proxyBinary is the idempotency-proxy binary to measure: given (--proxy-bin)
// when set, else one built by buildProxy.
func (c *children) proxyBinary(ctx context.Context, given string) (string, error) {
	if given != "" {
		return given, nil
	}
	return c.buildProxy(ctx)
}

// productModule is the module path of idempotency-proxy, which this
// benchmark's module requires (bench/go.mod replaces it with the checkout
// around it).
const productModule = "github.com/idempotency-proxy/idempotency-proxy"

// buildProxy builds ./cmd/idempotency-proxy of the checkout this benchmark
// belongs to, once per run, in the product's module alone (GOWORK=off): the
// binary measured is the one its go.mod makes, whatever the benchmark's own
// requirements select.
func (c *children) buildProxy(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", productModule).Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", productModule, err)
	}
	bin := filepath.Join(c.dir, "idempotency-proxy")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/idempotency-proxy")
	cmd.Dir = strings.TrimSpace(string(out))
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/idempotency-proxy: %w\n%s", err, msg)
	}
	return bin, nil
}

// startSelf re-executes this benchmark in a helper mode (upstream or plain
// proxy), so that its CPU time is its own and can be read from /proc.
func (c *children) startSelf(ctx context.Context, label string, args ...string) (pid int, addr string, err error) {
	self, err := os.Executable()
	if err != nil {
		return 0, "", err
	}
	addr, err = freeAddr()
	if err != nil {
		return 0, "", err
	}
	cmd, err := c.start(label, self, append([]string{"--serve-" + label, addr}, args...), c.layout.childEnv())
	if err != nil {
		return 0, "", err
	}
	pid = cmd.Process.Pid
	if err := waitHTTP(ctx, "http://"+addr+"/ready", cmd); err != nil {
		return 0, "", fmt.Errorf("%s: %w\n%s", label, err, c.logTail(pid))
	}
	return pid, addr, nil
}

// startProxy starts the idempotency-proxy binary in front of upstream;
// redisURL selects the Redis store, empty the memory store.
func (c *children) startProxy(ctx context.Context, label, bin, upstream, redisURL string, pprof bool) (pid int, addr, admin string, err error) {
	var store []string
	if redisURL != "" {
		store = []string{"--redis-url", redisURL}
	}
	return c.startProxyOn(ctx, label, bin, upstream, store, nil, pprof)
}

// startProxyOn starts the idempotency-proxy binary in front of upstream
// with storeArgs selecting its store (none: memory) and storeEnv more of
// its settings.
func (c *children) startProxyOn(ctx context.Context, label, bin, upstream string, storeArgs, storeEnv []string, pprof bool) (pid int, addr, admin string, err error) {
	addr, err = freeAddr()
	if err != nil {
		return 0, "", "", err
	}
	admin, err = freeAddr()
	if err != nil {
		return 0, "", "", err
	}
	// Nothing but the addresses and the store is set: the proxy runs with
	// the defaults a user gets (access log on, log level info), its stderr
	// a file as a container's is (launch).
	args := append([]string{"--upstream", "http://" + upstream, "--listen", addr, "--admin-listen", admin}, storeArgs...)
	// A full run records a few hundred thousand responses; the default
	// 256 MiB bound would start refusing new keys part-way through.
	env := append([]string{"IDEMPOTENCY_PROXY_STORE_MEMORY_MAX_BYTES=2GiB"}, storeEnv...)
	env = append(env, c.layout.childEnv()...)
	if pprof {
		env = append(env, "IDEMPOTENCY_PROXY_ADMIN_PPROF=true")
	}
	cmd, err := c.start(label, bin, args, env)
	if err != nil {
		return 0, "", "", err
	}
	pid = cmd.Process.Pid
	if err := waitHTTP(ctx, "http://"+admin+"/readyz", cmd); err != nil {
		return 0, "", "", fmt.Errorf("%s: %w\n%s", label, err, c.logTail(pid))
	}
	return pid, addr, admin, nil
}

// proxyConfig says how every idempotency-proxy target runs, for the
// head of each report: what a user runs, unless a target's name says more.
func proxyConfig(stderrPipe bool) string {
	stderr := "a file"
	if stderrPipe {
		stderr = "a pipe the benchmark drains"
	}
	return "idempotency-proxy with its defaults (access_log: true, log_level: info), stderr to " + stderr + "; store.memory.max_bytes: 2GiB"
}

// accessLogOff is the environment of the targets --access-log-off adds
// (memory-nolog, redis-nolog): the defaults but for the access log.
var accessLogOff = []string{"IDEMPOTENCY_PROXY_ACCESS_LOG=false"}

// shadowMode is the environment of the target --shadow adds
// (memory-shadow): the defaults but for mode: shadow.
var shadowMode = []string{"IDEMPOTENCY_PROXY_DEFAULTS_MODE=shadow"}

// startRedis starts a redis-server of the benchmark's own, without
// persistence, on a free loopback port. The shared Redis on 6379 is never used.
func (c *children) startRedis(ctx context.Context) (pid int, addr string, err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return 0, "", fmt.Errorf("redis-server not found: %w", err)
	}
	addr, err = freeAddr()
	if err != nil {
		return 0, "", err
	}
	_, port, _ := net.SplitHostPort(addr)
	args := []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", c.dir}
	cmd, err := c.start("redis", bin, args, nil)
	if err != nil {
		return 0, "", err
	}
	pid = cmd.Process.Pid
	if err := waitPing(ctx, addr); err != nil {
		return 0, "", fmt.Errorf("redis-server: %w\n%s", err, c.logTail(pid))
	}
	return pid, addr, nil
}

// waitHTTP polls url until it answers 200, the process exits or 20 s pass.
func waitHTTP(ctx context.Context, url string, cmd *exec.Cmd) error {
	client := &http.Client{Timeout: time.Second}
	return poll(ctx, 20*time.Second, func() (bool, error) {
		if alive(cmd.Process.Pid) != nil {
			return false, errors.New("exited during start-up")
		}
		resp, err := client.Get(url)
		if err != nil {
			return false, nil
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

func waitPing(ctx context.Context, addr string) error {
	return poll(ctx, 10*time.Second, func() (bool, error) {
		reply, err := redisCommand(addr, "PING")
		return err == nil && reply == "+PONG", nil
	})
}

// poll calls check every 20 ms until it reports done, fails, or timeout passes.
func poll(ctx context.Context, timeout time.Duration, check func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		done, err := check()
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("not ready after %s", timeout)
}

// alive reports an error when pid is gone or a zombie.
func alive(pid int) error {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return err
	}
	if i := strings.LastIndexByte(string(b), ')'); i > 0 && len(b) > i+2 && b[i+2] == 'Z' {
		return errors.New("process exited")
	}
	return nil
}

// redisCommand sends one inline command on a fresh connection and returns
// the first line of the reply.
func redisCommand(addr, command string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(conn, command+"\r\n"); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}
