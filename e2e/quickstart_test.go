package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
)

// The README opens with the two commands a fresh machine runs, and CI runs
// the same test command.
func TestReadmeStartsWithRunAndTestCommands(t *testing.T) {
	got := shellCommands(t, markdownSection(t, readme(t), ""))
	want := [][][]string{
		{{"go", "run", "./cmd/idempotency-proxy", "--upstream", "http://127.0.0.1:3000"}},
		{{"scripts/test.sh"}},
	}
	if !slices.EqualFunc(got, want, func(a, b [][]string) bool {
		return slices.EqualFunc(a, b, slices.Equal[[]string])
	}) {
		t.Errorf("README opens with commands %q, want %q", got, want)
	}
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^scripts/test\.sh$`).Match(ci) {
		t.Error(".ci/run does not run the README's test command scripts/test.sh")
	}
	script, err := os.ReadFile(filepath.Join(root, "scripts", "test.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^exec go test -race "\$@"$`).Match(script) ||
		!regexp.MustCompile(`(?m)^\[ \$# -gt 0 \] \|\| set -- \./\.\.\.$`).Match(script) {
		t.Error("scripts/test.sh does not run go test -race ./...")
	}
	// The end-to-end package runs near go test's default 10m, and the
	// alert rules' tests skip without promtool: the script sets the one
	// and installs the other, as CI does.
	if !regexp.MustCompile(`(?m)^export GOFLAGS=.*-timeout=30m"$`).Match(script) {
		t.Error("scripts/test.sh does not give the packages a 30m timeout, as the README says")
	}
	if promtool := regexp.MustCompile(`(?m)^\. scripts/promtool\.sh `); !promtool.Match(script) || !promtool.Match(ci) {
		t.Error("scripts/test.sh and .ci/run do not both install promtool with scripts/promtool.sh")
	}
}

// quickStart runs the README's quick start on free ports: the addresses it
// names (:3000 upstream, :8080 proxy, :9090 admin) are mapped to them.
type quickStart struct {
	t        *testing.T
	addrs    map[string]string // README port → address used here
	built    bool              // the README built the binary
	upstream *testbin.Process
	proxy    *testbin.Process
}

var readmeAddrRE = regexp.MustCompile(`(?:127\.0\.0\.1|localhost)?:(3000|8080|9090)\b`)

// rewrite maps the README's addresses in arg to the test's.
func (q *quickStart) rewrite(arg string) string {
	return readmeAddrRE.ReplaceAllStringFunc(arg, func(m string) string {
		return q.addrs[m[strings.LastIndexByte(m, ':')+1:]]
	})
}

func (q *quickStart) rewriteAll(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = q.rewrite(a)
	}
	return out
}

// executionLogRE matches the demo upstream's log line of one execution.
var executionLogRE = regexp.MustCompile(`(?m)\bexecution (\d+): (\S+ \S+)`)

// curlResult is what one curl of the README got.
type curlResult struct {
	method, url string
	status      int
	header      http.Header
	body        string
}

// TestQuickStart walks the README's quick start against the built binaries:
// the demo upstream, the proxy, the request sent twice and replayed, the
// admin port's /metrics and /readyz, the proxy listener proxying /healthz,
// and a drain on SIGTERM.
func TestQuickStart(t *testing.T) {
	q := &quickStart{t: t, addrs: map[string]string{
		"3000": freeAddr(t), "8080": freeAddr(t), "9090": freeAddr(t),
	}}
	var curls []curlResult
	for _, pipeline := range shellCommands(t, markdownSection(t, readme(t), "Quick start")) {
		argv := pipeline[0]
		switch {
		case len(argv) >= 3 && argv[0] == "go" && argv[1] == "run" && argv[2] == "./examples/upstream":
			args := append(q.rewriteAll(argv[3:]), "--listen", q.addrs["3000"])
			q.upstream = testbin.Start(t, testbin.Command{Path: testbin.Upstream.Path(t), Args: args})
			waitOutput(t, q.upstream, q.upstream.Stderr, "listening on")
		case slices.Equal(argv, []string{"go", "build", "-o", "idempotency-proxy", "./cmd/idempotency-proxy"}):
			q.built = true // testbin.Proxy is this build
		case argv[0] == "./idempotency-proxy":
			if !q.built || q.upstream == nil {
				t.Fatalf("README runs %q before building it and starting the upstream", argv)
			}
			args := append(q.rewriteAll(argv[1:]), "--listen", q.addrs["8080"], "--admin-listen", q.addrs["9090"])
			q.proxy = testbin.Start(t, testbin.Command{Path: proxyBin, Args: args})
			if err := q.proxy.WaitReady(readyTimeout, "http://"+q.addrs["9090"]+"/healthz"); err != nil {
				t.Fatalf("the proxy did not start: %v", err)
			}
		case argv[0] == "curl":
			if q.proxy == nil {
				t.Fatalf("README runs %q before the proxy", argv)
			}
			res := q.curl(argv[1:])
			if len(pipeline) > 1 {
				q.grep(res, pipeline[1:])
			}
			curls = append(curls, res)
		default:
			t.Fatalf("the quick start runs %q, which this test does not know how to run", pipeline)
		}
	}

	t.Run("replay", func(t *testing.T) { checkReplay(t, curls) })
	t.Run("upstream logged one execution for both POSTs", func(t *testing.T) {
		// The log reaches the test through a pipe, after the answer: wait
		// for the last execution (the GET of /healthz, which follows the
		// POSTs), then every line is there.
		waitOutput(t, q.upstream, q.upstream.Stderr, "execution 2: GET /healthz")
		var got []string
		for _, m := range executionLogRE.FindAllStringSubmatch(q.upstream.Stderr(), -1) {
			got = append(got, m[1]+" "+m[2])
		}
		if want := []string{"1 POST /v1/charges", "2 GET /healthz"}; !slices.Equal(got, want) {
			t.Errorf("upstream executions %q, want %q", got, want)
		}
	})
	t.Run("admin port", func(t *testing.T) { checkAdmin(t, q, curls) })
	t.Run("proxy listener proxies /healthz", func(t *testing.T) {
		r := findCurl(t, curls, "GET", q.addrs["8080"], "/healthz")
		var body struct{ Execution int }
		if r.status != http.StatusOK || json.Unmarshal([]byte(r.body), &body) != nil || body.Execution != 2 {
			t.Errorf("GET :8080/healthz = %d %q, want the upstream's answer, execution 2", r.status, r.body)
		}
	})
	t.Run("SIGTERM drains and exits 0", func(t *testing.T) {
		if err := q.proxy.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code, ok := q.proxy.Wait(30 * time.Second); !ok || code != 0 {
			t.Errorf("after SIGTERM: exit %d (exited: %v), want 0", code, ok)
		}
	})
}

func checkReplay(t *testing.T, curls []curlResult) {
	var posts []curlResult
	for _, c := range curls {
		if c.method == http.MethodPost {
			posts = append(posts, c)
		}
	}
	if len(posts) != 2 {
		t.Fatalf("the quick start sends %d POSTs, want the same one twice", len(posts))
	}
	first, second := posts[0], posts[1]
	if first.status != http.StatusOK || first.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("first POST: %d, Idempotent-Replayed %q; want 200, executed", first.status, first.header.Get("Idempotent-Replayed"))
	}
	if second.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("second POST: Idempotent-Replayed %q, want true", second.header.Get("Idempotent-Replayed"))
	}
	if second.status != first.status || second.body != first.body {
		t.Errorf("second POST answered %d %q, want the first answer %d %q replayed", second.status, second.body, first.status, first.body)
	}
	if !strings.Contains(first.body, `"execution":1`) {
		t.Errorf("first POST body %q, want the upstream's execution 1", first.body)
	}
}

func checkAdmin(t *testing.T, q *quickStart, curls []curlResult) {
	metrics := findCurl(t, curls, "GET", q.addrs["9090"], "/metrics")
	for _, series := range []string{
		`idempotency_proxy_requests_total{outcome="executed",route="default"} 1`,
		`idempotency_proxy_requests_total{outcome="replayed",route="default"} 1`,
	} {
		if metrics.status != http.StatusOK || !strings.Contains(metrics.body, series) {
			t.Errorf("GET :9090/metrics = %d, want 200 with %s", metrics.status, series)
		}
	}
	if r := findCurl(t, curls, "GET", q.addrs["9090"], "/readyz"); r.status != http.StatusOK {
		t.Errorf("GET :9090/readyz = %d %q, want 200", r.status, r.body)
	}
}

func findCurl(t *testing.T, curls []curlResult, method, addr, path string) curlResult {
	t.Helper()
	for _, c := range curls {
		if u, _ := url.Parse(c.url); c.method == method && u.Host == addr && u.Path == path {
			return c
		}
	}
	t.Fatalf("the quick start has no %s of %s on %s", method, path, addr)
	return curlResult{}
}

// curl does with net/http what curl would with the flags the README uses.
func (q *quickStart) curl(args []string) curlResult {
	t := q.t
	t.Helper()
	var method, target, data string
	var hasData bool
	header := http.Header{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		value := func() string {
			if i+1 >= len(args) {
				t.Fatalf("curl %s needs a value", a)
			}
			i++
			return args[i]
		}
		switch a {
		case "-i", "-s", "-sS", "-S", "--include", "--silent":
		case "-X", "--request":
			method = value()
		case "-H", "--header":
			k, v, _ := strings.Cut(value(), ":")
			header.Add(k, strings.TrimSpace(v))
		case "-d", "--data":
			data, hasData = value(), true
		default:
			if strings.HasPrefix(a, "-") || target != "" {
				t.Fatalf("curl %q: argument %q is not one this test runs", args, a)
			}
			target = q.rewrite(a)
		}
	}
	if method == "" {
		method = http.MethodGet
		if hasData {
			method = http.MethodPost
		}
	}
	if hasData && header.Get("Content-Type") == "" {
		header.Set("Content-Type", "application/x-www-form-urlencoded") // curl's default for -d
	}
	req, err := http.NewRequest(method, target, strings.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("curl %q: %v", args, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("curl %q: reading the body: %v", args, err)
	}
	return curlResult{method: method, url: target, status: res.StatusCode, header: res.Header, body: string(body)}
}

// grep checks that what the README pipes into grep has a matching line.
func (q *quickStart) grep(res curlResult, rest [][]string) {
	t := q.t
	t.Helper()
	if len(rest) != 1 || len(rest[0]) != 2 || rest[0][0] != "grep" {
		t.Fatalf("curl output piped into %q: only `| grep PATTERN` is run here", rest)
	}
	re, err := regexp.Compile(rest[0][1])
	if err != nil {
		t.Fatalf("grep %q: %v", rest[0][1], err)
	}
	if !re.MatchString(res.body) {
		t.Errorf("%s %s | grep %s: no line matches", res.method, res.url, rest[0][1])
	}
}
