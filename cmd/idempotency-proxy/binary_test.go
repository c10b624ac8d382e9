package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

// proc is a running idempotency-proxy.
type proc struct {
	*testbin.Process
	listen string // proxy address
	admin  string // admin address
	logs   *testbin.Buffer
}

// freeAddr returns a loopback host:port that was free a moment ago.
var freeAddr = testbin.FreeAddr

// start runs the binary with args plus free listen addresses, and waits
// until its admin listener answers /healthz.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{listen: freeAddr(t), admin: freeAddr(t)}
	args = append(args, "--listen", p.listen, "--admin-listen", p.admin)
	p.Process = testbin.Start(t, testbin.Command{Path: testbin.Proxy.Path(t), Args: args, Env: env})
	p.logs = p.Process.StderrBuffer()
	if err := p.WaitReady(15*time.Second, "http://"+p.admin+"/healthz"); err != nil {
		t.Fatalf("the proxy did not start: %v\n%s", err, p.logs.String())
	}
	return p
}

// waitFor fails the test unless cond holds within 15s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	wait.SucceedsSoon(t, 15*time.Second, func() error {
		if !cond() {
			return errors.New("waiting for " + what)
		}
		return nil
	})
}

func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// exitCode waits for the process to exit and returns its status.
func (p *proc) exitCode(t *testing.T) int {
	t.Helper()
	code, ok := p.Wait(30 * time.Second)
	if !ok {
		t.Fatal("the proxy did not exit")
	}
	return code
}

func (p *proc) post(t *testing.T, path, key, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("POST", "http://"+p.listen+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func (p *proc) get(t *testing.T, path string) (int, string) {
	t.Helper()
	res, err := http.Get("http://" + p.admin + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// metric returns the value of one exposition line, e.g.
// `idempotency_proxy_requests_total{outcome="executed",route="default"}`.
func (p *proc) metric(t *testing.T, series string) string {
	t.Helper()
	_, text := p.get(t, "/metrics")
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return rest
		}
	}
	return ""
}

// runBinary runs the binary to completion and returns its exit code and output.
func runBinary(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(testbin.Proxy.Path(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func goVersion() string {
	out, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
