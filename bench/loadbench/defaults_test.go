//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// TestProxyTargetsRunWhatAUserRuns starts the idempotency-proxy target as
// every mode of the benchmark does and sends it one request: with the
// product's defaults the access log is on, so the request's access line
// reaches the target's stderr — a file, or with --stderr pipe a pipe the
// benchmark drains. A target started with a quieter log level or the
// access log off measures what no user runs by default.
func TestProxyTargetsRunWhatAUserRuns(t *testing.T) {
	t.Setenv(childEnvVar, "1")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	build, err := newChildren(unpinned)
	if err != nil {
		t.Fatal(err)
	}
	defer build.killAll()
	bin, err := build.proxyBinary(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		pipe   bool
		stderr string // what the target's fd 2 links to, in /proc
	}{{"stderr to a file", false, "/proxy-memory.log"}, {"stderr to a pipe", true, "pipe:"}} {
		t.Run(tc.name, func(t *testing.T) {
			kids, err := newChildren(unpinned)
			if err != nil {
				t.Fatal(err)
			}
			defer kids.killAll()
			kids.stderrPipe = tc.pipe
			_, upAddr, err := kids.startSelf(ctx, "upstream")
			if err != nil {
				t.Fatal(err)
			}
			pid, addr, _, err := kids.startProxy(ctx, "proxy-memory", bin, upAddr, "", false)
			if err != nil {
				t.Fatal(err)
			}
			if fd2, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/2", pid)); err != nil || !strings.Contains(fd2, tc.stderr) {
				t.Errorf("the target's stderr is %q (%v), want %q", fd2, err, tc.stderr)
			}
			res, err := http.Get("http://" + addr + "/measured")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			kids.mu.Lock()
			logPath := kids.logs[pid]
			kids.mu.Unlock()
			wait.SucceedsSoon(t, 30*time.Second, func() error {
				b, err := os.ReadFile(logPath)
				if err != nil {
					return err
				}
				if !strings.Contains(string(b), `"msg":"access"`) || !strings.Contains(string(b), `"path":"/measured"`) {
					return fmt.Errorf("no access line for /measured in the target's log:\n%s", b)
				}
				return nil
			})
		})
	}
}
