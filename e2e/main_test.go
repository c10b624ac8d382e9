// Package e2e holds the black-box end-to-end and fault tests of
// idempotency-proxy: the built binary, real redis-server processes, real
// kills. TestMain builds the binary once; every test starts its own proxy
// processes, Redis servers and upstream on free loopback ports.
package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// proxyBin is the path of the binary built by TestMain.
var proxyBin string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	var err error
	proxyBin, err = testbin.Proxy.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		testbin.Cleanup()
		return 1
	}
	code := testbin.Main(m)
	if leaked := childProcesses(); len(leaked) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: processes still running after the tests: %s\n", strings.Join(leaked, "; "))
		if code == 0 {
			code = 1
		}
	}
	return code
}

// childProcesses lists the live children of this test binary (Linux only:
// elsewhere it reports none). Every proxy and redis-server a test starts is
// killed in t.Cleanup, so any child left here is a leak. Zombies are
// ignored: they hold no port and no memory. A child may still be exiting
// when the last cleanup returns, so the check polls briefly.
func childProcesses() []string {
	var kids []string
	_ = wait.SoonError(3*time.Second, func() error {
		if kids = scanChildren(os.Getpid()); len(kids) > 0 {
			return errors.New("child processes left")
		}
		return nil
	})
	return kids
}

func scanChildren(parent int) []string {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var kids []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Format: pid (comm) state ppid ...; comm may contain spaces.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == parent {
			kids = append(kids, fmt.Sprintf("pid %d %s", pid, s[strings.IndexByte(s, '(')+1:i]))
		}
	}
	return kids
}
