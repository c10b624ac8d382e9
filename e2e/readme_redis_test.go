package e2e

import (
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
)

// TestReadmeRunsOnAPlainRedisServer runs the README's two commands for
// Redis, the server on a free port and the proxy pointed at it: --check
// accepts the server as installed, with no warning, and a retried request
// is a replay.
func TestReadmeRunsOnAPlainRedisServer(t *testing.T) {
	cmds := shellCommands(t, markdownSection(t, readme(t), "With Redis"))
	if len(cmds) != 2 || cmds[0][0][0] != "redis-server" || cmds[1][0][0] != "./idempotency-proxy" {
		t.Fatalf("the README's Redis section runs %q, want redis-server then one ./idempotency-proxy command", cmds)
	}
	// The server gets the README's arguments; redistest only adds a free
	// port, a temp dir and no persistence, none of which the proxy checks.
	srv := redistest.Start(t, cmds[0][0][1:]...)
	up := startUpstream(t)
	args := slices.Clone(cmds[1][0][1:])
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--upstream":
			args[i+1] = up.URL()
		case "--redis-url":
			if args[i+1] != "redis://127.0.0.1:6379" {
				t.Errorf("the README points the proxy at %s, want redis-server's default redis://127.0.0.1:6379", args[i+1])
			}
			args[i+1] = "redis://" + srv.Addr()
		}
	}

	check, err := exec.Command(proxyBin, append(slices.Clone(args), "--check")...).CombinedOutput()
	if err != nil || !strings.Contains(string(check), "maxmemory-policy noeviction") || strings.Contains(string(check), "WARN") {
		t.Errorf("--check on a plain redis-server: %v\n%s\nwant it ok with maxmemory-policy noeviction and no warning", err, check)
	}

	listen, admin := freeAddr(t), freeAddr(t)
	proxy := testbin.Start(t, testbin.Command{Path: proxyBin, Args: append(args, "--listen", listen, "--admin-listen", admin)})
	if err := proxy.WaitReady(readyTimeout, "http://"+admin+"/readyz"); err != nil {
		t.Fatalf("the proxy did not start on Redis: %v\n%s", err, proxy.Stderr())
	}
	c := newClient(t, 10*time.Second)
	first := mustSend(t, c, "http://"+listen, request{Key: "readme"})
	again := mustSend(t, c, "http://"+listen, request{Key: "readme"})
	if first.Status != http.StatusCreated || !again.Replayed() || again.Body != first.Body || up.Count("readme") != 1 {
		t.Errorf("on Redis: %s then %s with %d executions, want a 201 and its replay", first, again, up.Count("readme"))
	}
}
