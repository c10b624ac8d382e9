package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The access lines are buffered, not written one a request: a SIGTERM
// right after a burst of requests still leaves every one of their lines on
// stderr (a pipe here) before the process's last line, and a warning
// written while access lines wait is written after them, not before.
func TestAccessLinesSurviveSIGTERM(t *testing.T) {
	up := startUpstream(t)
	p := startProxy(t, "access-sigterm", proxyConfig{Upstream: up.URL(), Memory: true})
	const n = 40
	for i := range n {
		res, err := http.Get(fmt.Sprintf("%s/burst/%d", p.URL(), i))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	p.Signal(syscall.SIGTERM)
	if code, ok := p.Wait(30 * time.Second); !ok || code != 0 {
		t.Fatalf("after SIGTERM: exited %v, code %d; want exit 0", ok, code)
	}
	lines := p.logLines(map[string]string{"msg": "access"})
	if len(lines) != n {
		t.Fatalf("%d access lines on stderr after SIGTERM, want %d:\n%s", len(lines), n, p.Logs())
	}
	for i, l := range lines {
		if want := fmt.Sprintf("/burst/%d", i); l["path"] != want {
			t.Errorf("access line %d is for %v, want %s: lines out of order", i, l["path"], want)
		}
	}
	logs := p.Logs()
	last := strings.LastIndex(logs, `"msg":"access"`)
	draining := strings.Index(logs, `"msg":"shutting down`)
	if draining < 0 || last > draining {
		t.Errorf("the shutdown line came before the access lines of the requests served before it:\n%s", logs)
	}
}
