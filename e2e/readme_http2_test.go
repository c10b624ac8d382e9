package e2e

import (
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
)

// The README's HTTP/2 section, run with the real curl against the built
// proxy over h2c, in front of the demo upstream as the quick start starts
// it: the payment sent twice over HTTP/2 is executed once and replayed.
func TestReadmeHTTP2(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("curl is required (scripts/test.sh installs it)")
	}
	q := &quickStart{t: t, addrs: map[string]string{"3000": freeAddr(t), "8080": freeAddr(t), "9090": freeAddr(t)}}
	q.upstream = testbin.Start(t, testbin.Command{Path: testbin.Upstream.Path(t), Args: []string{"--listen", q.addrs["3000"]}})
	waitOutput(t, q.upstream, q.upstream.Stderr, "listening on")
	q.proxy = testbin.Start(t, testbin.Command{Path: proxyBin, Args: []string{
		"--upstream", "http://" + q.addrs["3000"], "--listen", q.addrs["8080"], "--admin-listen", q.addrs["9090"]}})
	if err := q.proxy.WaitReady(readyTimeout, "http://"+q.addrs["9090"]+"/healthz"); err != nil {
		t.Fatalf("the proxy did not start: %v", err)
	}
	var answers []string
	for _, pipeline := range shellCommands(t, markdownSection(t, readme(t), "HTTP/2 and gRPC")) {
		argv := pipeline[0]
		if argv[0] != "curl" || len(pipeline) != 1 || !slices.Contains(argv, "--http2-prior-knowledge") {
			t.Fatalf("the HTTP/2 section runs %q; this test runs curl --http2-prior-knowledge", pipeline)
		}
		out, err := exec.Command(curl, q.rewriteAll(argv[1:])...).Output()
		if err != nil {
			t.Fatalf("curl %q: %v", argv, err)
		}
		answers = append(answers, strings.ReplaceAll(string(out), "\r\n", "\n"))
	}
	if len(answers) != 2 {
		t.Fatalf("the section sends %d requests, want the same one twice", len(answers))
	}
	head := func(a string) (status string, replayed bool, body string) {
		h, b, _ := strings.Cut(a, "\n\n")
		status, _, _ = strings.Cut(h, "\n")
		return strings.TrimSpace(status), regexp.MustCompile(`(?mi)^idempotent-replayed: true$`).MatchString(h), b
	}
	s1, r1, b1 := head(answers[0])
	s2, r2, b2 := head(answers[1])
	if s1 != "HTTP/2 200" || r1 || !strings.Contains(b1, `"execution":1`) {
		t.Errorf("first answer %q, replayed %v, body %q; want HTTP/2 200, execution 1", s1, r1, b1)
	}
	if s2 != "HTTP/2 200" || !r2 || b2 != b1 {
		t.Errorf("second answer %q, replayed %v, body %q; want the first replayed over HTTP/2", s2, r2, b2)
	}
}
