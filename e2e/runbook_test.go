package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// The operator runbook for a stuck key (docs/operating.md, "A stuck key"),
// step by step against the built binary: the log line names the key_hash,
// `keys get` shows the lease, `keys delete` removes it, the client's retry
// executes, and the fenced first request is counted as a lost lease and
// never overwrites the retry's record.

const (
	runbookToken = "runbook-token"
	clientAuth   = "Bearer client-a"
)

// startAdminProxy runs the binary with storeYAML (the store: section) and
// the admin API enabled, logging at debug so every keyed request has a line.
func startAdminProxy(t *testing.T, up *upstream, storeYAML string) *proxyProc {
	t.Helper()
	p := &proxyProc{t: t, name: "admin", stderr: &testbin.Buffer{}}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("proxy stderr:\n%s", p.stderr.String())
		}
	})
	var err error
	for range 3 { // a probed free port may be taken before the proxy binds it
		p.listen, p.admin = freeAddr(t), freeAddr(t)
		p.config = filepath.Join(t.TempDir(), "proxy.yaml")
		cfg := fmt.Sprintf("listen: %q\nadmin_listen: %q\nlog_level: debug\nupstream:\n  url: %q\n%s"+
			"admin:\n  token: %q\ndefaults:\n  ttl: 1h\n  lock_ttl: 1h\n",
			p.listen, p.admin, up.URL(), storeYAML, runbookToken)
		if err = os.WriteFile(p.config, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		if err = p.launch(); err == nil {
			return p
		}
	}
	t.Fatalf("proxy did not start: %v\n%s", err, p.stderr.String())
	return nil
}

// keysCLI runs `idempotency-proxy keys ARGS --admin p` with the token in
// the environment.
func keysCLI(t *testing.T, p *proxyProc, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(proxyBin, append(append([]string{"keys"}, args...), "--admin", p.AdminURL())...)
	cmd.Env = append(os.Environ(), "IDEMPOTENCY_PROXY_ADMIN_TOKEN="+runbookToken)
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errs.String()
}

// keysJSON runs keysCLI, requires exit 0 and decodes stdout.
func keysJSON(t *testing.T, p *proxyProc, args ...string) map[string]any {
	t.Helper()
	code, out, errs := keysCLI(t, p, args...)
	if code != 0 {
		t.Fatalf("keys %s: exit %d, stderr %s", strings.Join(args, " "), code, errs)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("keys %s: stdout %q: %v", strings.Join(args, " "), out, err)
	}
	return v
}

// keyedPost sends a keyed POST; hold makes the upstream wait until Unhold.
func keyedPost(t *testing.T, p *proxyProc, path, key string, hold bool) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", p.URL()+path, strings.NewReader(`{"amount":1}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", clientAuth) // keys are scoped by it
	if hold {
		req.Header.Set(hdrHold, "1")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("POST %s: %v", path, err)
		return 0, ""
	}
	defer res.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(res.Body)
	return res.StatusCode, b.String()
}

// loggedKeyHash waits for a log line of logs (a proxy's standard error)
// with the given outcome and a key_hash — the request's lines are written
// once the response has gone out, so they may trail the client's answer —
// and returns the key_hash, which must be the full 32-digit hash.
func loggedKeyHash(t *testing.T, logs func() string, outcome string) string {
	t.Helper()
	var hash string
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		sc := bufio.NewScanner(strings.NewReader(logs()))
		for sc.Scan() {
			var l struct {
				Outcome string `json:"outcome"`
				KeyHash string `json:"key_hash"`
			}
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Outcome == outcome && l.KeyHash != "" {
				if len(l.KeyHash) != 32 {
					t.Fatalf("key_hash %q in %s, want the full 32-digit hash", l.KeyHash, sc.Bytes())
				}
				hash = l.KeyHash
				return nil
			}
		}
		return fmt.Errorf("no log line with outcome %q and a key_hash", outcome)
	})
	return hash
}

// adminMetric reads one series from the proxy's /metrics.
func adminMetric(t *testing.T, p *proxyProc, series string) string {
	t.Helper()
	res, err := http.Get(p.AdminURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return v
		}
	}
	return ""
}

func runStuckKeyRunbook(t *testing.T, storeYAML string) {
	up := startUpstream(t)
	p := startAdminProxy(t, up, storeYAML)
	const key = "stuck-charge-1"

	// The first attempt hangs upstream; every retry gets 409.
	first := make(chan int, 1)
	go func() { code, _ := keyedPost(t, p, "/v1/charges", key, true); first <- code }()
	t.Cleanup(up.Unhold)
	up.WaitCount(key, 1, 10*time.Second)
	if code, _ := keyedPost(t, p, "/v1/charges", key, false); code != http.StatusConflict {
		t.Fatalf("retry while the first attempt hangs: %d, want 409", code)
	}

	// The conflict's log line names the key; `keys hash` computes the same.
	logged := loggedKeyHash(t, p.Logs, "conflict")
	hash := keysJSON(t, p, "hash", "--key", key, "--method", "POST", "--path", "/v1/charges", "--host", p.listen,
		"--header", "Authorization: "+clientAuth)["key_hash"].(string)
	if !strings.HasPrefix(hash, logged) {
		t.Fatalf("keys hash = %s, the log line says key_hash %s", hash, logged)
	}

	listed := keysJSON(t, p, "list", "--state", "in_flight")
	if keys := listed["keys"].([]any); len(keys) != 1 || keys[0].(map[string]any)["key_hash"] != hash {
		t.Fatalf("keys list --state in_flight = %v, want the one stuck key %s", listed, hash)
	}
	got := keysJSON(t, p, "get", hash)
	if got["state"] != "in_flight" {
		t.Fatalf("keys get = %v, want state in_flight", got)
	}
	if _, err := time.Parse(time.RFC3339, got["expires_at"].(string)); err != nil {
		t.Errorf("expires_at %v: %v", got["expires_at"], err)
	}

	if del := keysJSON(t, p, "delete", hash); del["deleted"] != true {
		t.Fatalf("keys delete = %v", del)
	}
	if code, _, errs := keysCLI(t, p, "get", hash); code != 1 || !strings.Contains(errs, "key-not-found") {
		t.Fatalf("keys get after delete: exit %d, stderr %q; want 1 and key-not-found", code, errs)
	}

	// The client's retry now executes, and its record is the one kept.
	code, retryBody := keyedPost(t, p, "/v1/charges", key, false)
	if code != http.StatusCreated || up.Count(key) != 2 {
		t.Fatalf("retry after delete: %d, %d executions; want 201 and a second execution", code, up.Count(key))
	}
	up.Unhold()
	if code := <-first; code != http.StatusCreated {
		t.Errorf("the fenced first attempt still gets its answer: %d, want 201", code)
	}
	waitForValue(t, "the fenced completion counted as a lost lease", func() string {
		return adminMetric(t, p, "idempotency_proxy_lock_lost_total")
	}, "1")
	// The lease was deleted long before its next renewal: only the
	// completion can have found it lost, and it must say so.
	if lines := p.logLines(map[string]string{"level": "WARN", "key_hash": hash, "during": "complete"}); len(lines) != 1 {
		t.Errorf("%d warnings that the completion found the lease lost, want 1", len(lines))
	}
	if code, body := keyedPost(t, p, "/v1/charges", key, false); code != http.StatusCreated || body != retryBody {
		t.Fatalf("replay after the fenced completion: %d %q, want the retry's answer %q", code, body, retryBody)
	}
	rec := keysJSON(t, p, "get", hash)
	if rec["state"] != "completed" || rec["status"] != float64(201) || rec["body_bytes"] != float64(len(retryBody)) {
		t.Errorf("keys get of the record = %v", rec)
	}

	if got := adminMetric(t, p, `idempotency_proxy_admin_operations_total{operation="delete",result="ok"}`); got != "1" {
		t.Errorf("admin deletes counted %q, want 1", got)
	}
	if !strings.Contains(p.Logs(), `"msg":"admin deleted key"`) || !strings.Contains(p.Logs(), `"key_hash":"`+hash+`"`) {
		t.Error("the delete was not logged with its key_hash")
	}
}

func waitForValue(t *testing.T, what string, get func() string, want string) {
	t.Helper()
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if got := get(); got != want {
			return fmt.Errorf("%s: %q, want %q", what, got, want)
		}
		return nil
	})
}

func TestStuckKeyRunbookOnMemoryStore(t *testing.T) {
	runStuckKeyRunbook(t, "store:\n  kind: memory\n")
}

func TestStuckKeyRunbookOnRedis(t *testing.T) {
	r := redistest.Start(t, "--maxmemory-policy", "noeviction")
	runStuckKeyRunbook(t, fmt.Sprintf("store:\n  kind: redis\n  redis:\n    url: %q\n", r.URL()))
}

// The operator's key API (get, list in pages, delete a stuck lease) on the
// Postgres store, through the keys command.
func TestStuckKeyRunbookOnPostgres(t *testing.T) {
	pg := pgtest.Start(t)
	runStuckKeyRunbook(t, fmt.Sprintf("store:\n  kind: postgres\n  postgres:\n    url: %q\n", pg.URL()))
}

// Listing pages through every master of a Cluster: every key is listed (a
// key may repeat on a later page while a master resizes its table, as
// Redis's SCAN allows; docs/operating.md says so).
func TestKeysListCoversEveryClusterMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	up := startUpstream(t)
	p := startAdminProxy(t, up, fmt.Sprintf("store:\n  kind: redis\n  redis:\n    addrs: [%s]\n", quoteList(cl.Addrs())))
	const n = 40
	want := map[string]bool{}
	for i := range n {
		key := fmt.Sprintf("list-%d", i)
		if code, _ := keyedPost(t, p, "/v1/charges", key, false); code != http.StatusCreated {
			t.Fatalf("POST %s: %d", key, code)
		}
		h := keysJSON(t, p, "hash", "--key", key, "--path", "/v1/charges", "--host", p.listen,
			"--header", "Authorization: "+clientAuth)["key_hash"].(string)
		want[h] = true
	}
	seen := map[string]int{}
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > n {
			t.Fatal("listing does not end")
		}
		args := []string{"list", "--state", "completed", "--limit", "7"}
		if cursor != "" {
			args = append(args, "--cursor", cursor)
		}
		page := keysJSON(t, p, args...)
		inPage := map[string]bool{}
		for _, k := range page["keys"].([]any) {
			e := k.(map[string]any)
			if inPage[e["key_hash"].(string)] {
				t.Errorf("key_hash %v twice in one page", e["key_hash"])
			}
			inPage[e["key_hash"].(string)] = true
			if e["state"] != "completed" {
				t.Errorf("state=completed listed %v", e)
			}
			seen[e["key_hash"].(string)]++
		}
		if cursor = page["next_cursor"].(string); cursor == "" {
			break
		}
	}
	for h := range want {
		if seen[h] == 0 {
			t.Errorf("key_hash %s not listed", h)
		}
	}
	if len(seen) != n {
		t.Errorf("listed %d keys, want %d", len(seen), n)
	}
	masters := map[string]bool{}
	for _, node := range cl.Nodes {
		if node.CountKeys(t, "idem:{*}") > 0 {
			masters[node.Addr()] = true
		}
	}
	if len(masters) < 2 {
		t.Fatalf("keys landed on %d masters; the test needs them spread", len(masters))
	}
}
