package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// walkThroughBase is the proxy the docs' curl commands talk to; the test
// points them at the proxy it started.
const walkThroughBase = "http://localhost:8080"

// TestLongOperationsWalkThroughRuns runs the curl commands of "Long
// operations" in docs/request-handling.md against the built proxy: the
// POST with Prefer: respond-async gets 202 and a status URL, and the GET
// of that URL gets 202 while the upstream runs, then the recorded answer.
func TestLongOperationsWalkThroughRuns(t *testing.T) {
	testbin.Tool(t, "curl", "Debian package curl")
	cmds := requestHandlingCommands(t, "Long operations: `Prefer: respond-async`")
	if len(cmds) != 2 || len(cmds[0]) != 1 || len(cmds[1]) != 1 || cmds[0][0][0] != "curl" || cmds[1][0][0] != "curl" {
		t.Fatalf("the walk-through runs %q, want two curl commands: the request and a poll of its status URL", cmds)
	}
	up := startUpstream(t)
	t.Cleanup(up.Unhold)
	cfg := asyncConfig(up)
	cfg.FilePath = t.TempDir()
	p := startReplicas(t, 1, cfg)[0]

	// The upstream holds the request until Unhold, so that the poll's 202
	// is seen whatever the machine's speed.
	first := runCurl(t, pointAt(cmds[0][0][1:], p.URL(), ""), "-H", hdrHold+": 1")
	loc := first.Header.Get("Location")
	if first.StatusCode != http.StatusAccepted || first.Header.Get("Preference-Applied") != "respond-async" ||
		first.Header.Get("Retry-After") != "1" || !strings.HasPrefix(loc, "/.well-known/idempotency/") {
		t.Fatalf("the walk-through's request: %d %v, want 202 with a Location under /.well-known/idempotency/, Preference-Applied and Retry-After: 1", first.StatusCode, first.Header)
	}
	key := first.Request.Header.Get("Idempotency-Key")
	up.WaitCount(key, 1, 10*time.Second)
	poll := pointAt(cmds[1][0][1:], p.URL(), loc)
	if r := runCurl(t, poll); r.StatusCode != http.StatusAccepted || r.Header.Get("Retry-After") == "" {
		t.Fatalf("the walk-through's poll while the upstream runs: %d %v, want 202 with Retry-After", r.StatusCode, r.Header)
	}
	up.Unhold()
	var done *http.Response
	wait.SucceedsSoon(t, 30*time.Second, func() error {
		if done = runCurl(t, poll); done.StatusCode == http.StatusAccepted {
			return fmt.Errorf("still running")
		}
		return nil
	})
	if done.StatusCode != http.StatusCreated || done.Header.Get("Idempotent-Replayed") != "true" || up.Count(key) != 1 {
		t.Errorf("the walk-through's poll once recorded: %d %v with %d executions, want the one 201 replayed", done.StatusCode, done.Header, up.Count(key))
	}
}

// pointAt returns args with the docs' proxy address replaced by base, and
// a status URL in them by base+loc.
func pointAt(args []string, base, loc string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		switch {
		case loc != "" && strings.HasPrefix(a, walkThroughBase+"/.well-known/idempotency/"):
			out[i] = base + loc
		case strings.HasPrefix(a, walkThroughBase):
			out[i] = base + strings.TrimPrefix(a, walkThroughBase)
		default:
			out[i] = a
		}
	}
	return out
}

// runCurl runs curl with args (which include -si) and parses what it
// printed; the returned Request carries the -H headers sent.
func runCurl(t *testing.T, args []string, extra ...string) *http.Response {
	t.Helper()
	args = append(append([]string{"--max-time", "20"}, args...), extra...)
	out, err := exec.CommandContext(t.Context(), "curl", args...).Output()
	if err != nil {
		t.Fatalf("curl %q: %v", args, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(out)), nil)
	if err != nil {
		t.Fatalf("curl %q printed %q: %v", args, out, err)
	}
	resp.Request = &http.Request{Header: http.Header{}}
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-H" {
			if k, v, ok := strings.Cut(args[i+1], ":"); ok {
				resp.Request.Header.Add(k, strings.TrimSpace(v))
			}
		}
	}
	return resp
}
