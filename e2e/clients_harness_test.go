package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/contract"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
)

// The clients' harness: the built proxy in front of a scripted upstream, and
// a front that loses answers. The Go, JavaScript and Python clients run the
// same scenarios against it (clients_contract_test.go, clients/js/test,
// clients/python/tests), told where everything is by environment variables:
//
//	IDEMPOTENCY_PROXY_URL     the proxy
//	IDEMPOTENCY_SLOW_PROXY_URL  a proxy with a short upstream.timeout (500ms):
//	                          /slow/ID there answers 504 upstream-timeout first
//	IDEMPOTENCY_FRONT_URL     the proxy behind a front that drops the connection
//	                          instead of delivering the first answer to /lose/ID
//	IDEMPOTENCY_UPSTREAM_URL  the scripted upstream, for GET /count/ID and
//	                          POST /release/ID
//	IDEMPOTENCY_CONTRACT      clients/contract.json
//
// Paths through the proxy (ID is any new string per scenario):
//
//	POST /answer/TYPE/ID  the first call answers like the proxy's problem TYPE
//	                      (its status, problem+json, Retry-After: 1 when the
//	                      contract says the proxy sends one), unrecorded
//	                      (Idempotency-Control: no-store); later calls execute
//	POST /always/TYPE/ID  every call answers like /answer/TYPE's first
//	POST /charge/ID       executes: 201 {"id", "execution", "body"}
//	POST /slow/ID         executes once POST /release/ID reached the upstream
//	POST /lose/ID         executes; the front loses the first answer
//
// The proxy's routes have async: allow, so a request with Prefer:
// respond-async gets 202 and a status URL (/slow/ID: until the release).
type harness struct {
	proxy, slowProxy, front, upstream string
	contract                          *contract.Contract
	contractPath                      string
}

// harnessOp is what the scripted upstream saw of one ID.
type harnessOp struct {
	Hits       int      `json:"hits"`       // requests that reached it
	Executions int      `json:"executions"` // of them, the ones that executed
	Keys       []string `json:"keys"`       // Idempotency-Key of each hit
}

type contractUpstream struct {
	c *contract.Contract

	mu       sync.Mutex
	ops      map[string]*harnessOp
	released map[string]chan struct{}
	stop     chan struct{}
}

func startHarness(t *testing.T) *harness {
	t.Helper()
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	c, err := contract.Load(root)
	if err != nil {
		t.Fatal(err)
	}
	up := &contractUpstream{c: c, ops: map[string]*harnessOp{}, released: map[string]chan struct{}{}, stop: make(chan struct{})}
	upSrv := httptest.NewServer(up)
	// Blocked /slow calls return before the server is closed.
	t.Cleanup(upSrv.Close)
	t.Cleanup(func() { close(up.stop) })
	p := startProxy(t, "clients", proxyConfig{
		Upstream: upSrv.URL,
		Memory:   true,
		Defaults: map[string]string{
			"upstream_control_header": "Idempotency-Control",
			"lock_ttl":                "30s",
			"async":                   "allow", // only requests with Prefer: respond-async see it
		},
		Env: []string{"IDEMPOTENCY_PROXY_ASYNC_SECRET=e2e-clients-async-secret-0123456789"},
	})
	slow := startProxy(t, "clients-slow", proxyConfig{
		Upstream:        upSrv.URL,
		UpstreamTimeout: 500 * time.Millisecond,
		Memory:          true,
		Defaults:        map[string]string{"lock_ttl": "30s"},
	})
	front := httptest.NewServer(&losingFront{target: p.URL(), lost: map[string]bool{}})
	t.Cleanup(front.Close)
	return &harness{proxy: p.URL(), slowProxy: slow.URL(), front: front.URL, upstream: upSrv.URL, contract: c,
		contractPath: root + "/" + contract.Path}
}

// env is the environment a client's test process runs with.
func (h *harness) env() []string {
	return append(os.Environ(),
		"IDEMPOTENCY_PROXY_URL="+h.proxy,
		"IDEMPOTENCY_SLOW_PROXY_URL="+h.slowProxy,
		"IDEMPOTENCY_FRONT_URL="+h.front,
		"IDEMPOTENCY_UPSTREAM_URL="+h.upstream,
		"IDEMPOTENCY_CONTRACT="+h.contractPath,
	)
}

func (u *contractUpstream) op(id string) *harnessOp {
	o, ok := u.ops[id]
	if !ok {
		o = &harnessOp{}
		u.ops[id] = o
	}
	return o
}

func (u *contractUpstream) releasedCh(id string) chan struct{} {
	ch, ok := u.released[id]
	if !ok {
		ch = make(chan struct{})
		u.released[id] = ch
	}
	return ch
}

func (u *contractUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	id := parts[len(parts)-1]
	switch {
	case r.Method == http.MethodGet && len(parts) == 2 && parts[0] == "count":
		u.mu.Lock()
		out, _ := json.Marshal(u.op(id))
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write(out)
		return
	case r.Method == http.MethodPost && len(parts) == 2 && parts[0] == "release":
		u.mu.Lock()
		ch := u.releasedCh(id)
		select {
		case <-ch:
		default:
			close(ch)
		}
		u.mu.Unlock()
		return
	case r.Method != http.MethodPost:
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	u.mu.Lock()
	o := u.op(id)
	o.Hits++
	o.Keys = append(o.Keys, r.Header.Get("Idempotency-Key"))
	first := o.Hits == 1
	released := u.releasedCh(id)
	u.mu.Unlock()

	switch {
	case (parts[0] == "answer" && first || parts[0] == "always") && len(parts) == 3:
		row, ok := u.c.ByType(parts[1])
		if !ok {
			http.Error(w, "no such problem type", http.StatusNotFound)
			return
		}
		w.Header().Set("Idempotency-Control", "no-store")
		w.Header().Set("Content-Type", "application/problem+json")
		if row.RetryAfter {
			w.Header().Set("Retry-After", "1")
		}
		w.WriteHeader(row.Status)
		fmt.Fprintf(w, `{"type":%q,"title":"scripted","status":%d,"detail":"scripted by the clients' harness"}`+"\n",
			u.c.ProblemBase+row.Type, row.Status)
		return
	case parts[0] == "slow":
		select {
		case <-released:
		case <-u.stop:
			http.Error(w, "harness stopped", http.StatusServiceUnavailable)
			return
		case <-r.Context().Done():
			return
		}
	}
	u.mu.Lock()
	o.Executions++
	n := o.Executions
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	out, _ := json.Marshal(map[string]any{"id": id, "execution": n, "body": string(body)})
	w.Write(append(out, '\n'))
}

// losingFront forwards to the proxy; for the first request to each /lose/
// path it reads the proxy's whole answer, then closes the client's
// connection without a byte: the answer was produced and lost on the way.
type losingFront struct {
	target string

	mu   sync.Mutex
	lost map[string]bool
}

func (f *losingFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, f.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	respBody, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))

	f.mu.Lock()
	lose := strings.HasPrefix(r.URL.Path, "/lose/") && !f.lost[r.URL.Path]
	f.lost[r.URL.Path] = true
	f.mu.Unlock()
	if lose {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(respBody)
}

// tool finds a program the clients' tests need: in CI it must be there,
// elsewhere its absence skips the test.
func tool(t *testing.T, name string) string {
	t.Helper()
	return testbin.Tool(t, name, "")
}

// runClientTests runs a client's own test command against the harness and
// fails with its output when it fails.
func runClientTests(t *testing.T, h *harness, dir string, name string, args ...string) {
	t.Helper()
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = root + "/" + dir
	cmd.Env = h.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	t.Logf("%s %s:\n%s", name, strings.Join(args, " "), lastLines(string(out), 12))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
