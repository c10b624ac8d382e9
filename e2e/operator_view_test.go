package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
)

const viewToken = "view-token"

// configCLI runs `idempotency-proxy config --admin p` with env added.
func configCLI(t *testing.T, p *proxyProc, env ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(proxyBin, "config", "--admin", p.AdminURL())
	cmd.Env = append(os.Environ(), env...)
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

// The operator sees the running configuration: `idempotency-proxy config`
// prints GET /admin/config, every value with its origin, the token masked;
// after a reload, the log names each changed key with its old and new
// value, and the view says which change waits for a restart.
func TestConfigViewAndReloadDiff(t *testing.T) {
	up := startUpstream(t)
	cfg := proxyConfig{
		Upstream: up.URL(),
		Memory:   true,
		Env:      []string{"IDEMPOTENCY_PROXY_ADMIN_TOKEN=" + viewToken, "IDEMPOTENCY_PROXY_DEFAULTS_LOCK_TTL=20s"},
		Defaults: map[string]string{"ttl": "1h"},
		Routes:   []routeConfig{{Match: "POST /v1/charges", Keys: map[string]string{"ttl": "72h"}}},
	}
	p := startProxy(t, "view", cfg)

	if code, out, errs := configCLI(t, p); code != 1 || out != "" || !strings.Contains(errs, "set IDEMPOTENCY_PROXY_ADMIN_TOKEN or --token-file") {
		t.Errorf("config without the token: exit %d, stdout %q, stderr %q; want 1 and how to set it", code, out, errs)
	}
	code, view, errs := configCLI(t, p, "IDEMPOTENCY_PROXY_ADMIN_TOKEN="+viewToken)
	if code != 0 {
		t.Fatalf("config: exit %d, stderr %s", code, errs)
	}
	for _, want := range []string{
		"listen: " + p.listen + " # file",
		"log_level: info # file",
		"  kind: memory # file",
		"  token: xxxxx # env IDEMPOTENCY_PROXY_ADMIN_TOKEN",
		"  ttl: 1h # file",
		"  lock_ttl: 20s # env IDEMPOTENCY_PROXY_DEFAULTS_LOCK_TTL",
		"  wait_timeout: 10s # default",
		"  - match: POST /v1/charges # file",
		"    ttl: 72h # file",
		"    lock_ttl: 20s # defaults",
	} {
		if !strings.Contains(view, "\n"+want+"\n") {
			t.Errorf("config view lacks %q:\n%s", want, view)
		}
	}
	if strings.Contains(view, viewToken) {
		t.Errorf("config view shows the admin token:\n%s", view)
	}

	cfg.Defaults = map[string]string{"ttl": "2h"}
	cfg.UpstreamTimeout = 5 * time.Second
	if err := os.WriteFile(p.config, []byte(cfg.yaml(p.listen, p.admin)), 0o600); err != nil {
		t.Fatal(err)
	}
	p.Signal(syscall.SIGHUP)
	var changes []map[string]any
	waitForValue(t, "a reload logged with its changes", func() string {
		for _, line := range p.logLines(map[string]string{"msg": "config reloaded"}) {
			b, _ := json.Marshal(line["changes"])
			changes = nil
			json.Unmarshal(b, &changes)
			if len(changes) > 0 {
				return "logged"
			}
		}
		return "not yet"
	}, "logged")
	want := map[string]string{
		"upstream.timeout": `{"key":"upstream.timeout","new":"5s","old":"1m","restart":true}`,
		"defaults.ttl":     `{"key":"defaults.ttl","new":"2h","old":"1h"}`,
	}
	for _, ch := range changes {
		b, _ := json.Marshal(ch)
		key, _ := ch["key"].(string)
		w, ok := want[key]
		if !ok {
			t.Errorf("reload logged a change of %s, which the edit left alone: %s", key, b)
			continue
		}
		if string(b) != w {
			t.Errorf("reload logged %s, want %s", b, w)
		}
		delete(want, key)
	}
	if len(want) > 0 {
		t.Errorf("reload did not log the changes of %v; logged %v", want, changes)
	}
	_, view, _ = configCLI(t, p, "IDEMPOTENCY_PROXY_ADMIN_TOKEN="+viewToken)
	for _, want := range []string{"  ttl: 2h # file", "  timeout: 5s # file; needs a restart, running with 1m"} {
		if !strings.Contains(view, "\n"+want+"\n") {
			t.Errorf("config view after the reload lacks %q:\n%s", want, view)
		}
	}
}

// The access log, on by default, has one info line per request with the
// path but never its query; access_log: false turns it off.
func TestAccessLogLinePerRequest(t *testing.T) {
	up := startUpstream(t)
	p := startProxy(t, "access", proxyConfig{Upstream: up.URL(), Memory: true})
	post := func(target string) {
		req, _ := http.NewRequest("POST", p.URL()+target, strings.NewReader(`{"amount":1}`))
		req.Header.Set("Idempotency-Key", "access-1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	post("/v1/charges?card=4242424242424242")
	post("/v1/charges?card=4242424242424242")
	var lines []map[string]any
	waitForValue(t, "two access lines", func() string {
		lines = p.logLines(map[string]string{"msg": "access", "level": "INFO"})
		return strconv.Itoa(len(lines))
	}, "2")
	for i, outcome := range []string{"executed", "replayed"} {
		l := lines[i]
		if l["method"] != "POST" || l["path"] != "/v1/charges" || l["route"] != "default" || l["outcome"] != outcome ||
			l["status"] == nil || l["bytes"] == float64(0) || len(fmt.Sprint(l["key_hash"])) < 32 || l["duration_seconds"] == nil {
			t.Errorf("access line %d = %v, want the %s POST /v1/charges with status, bytes, duration and key_hash", i, l, outcome)
		}
	}
	if strings.Contains(p.Logs(), "4242424242424242") {
		t.Error("the query string reached the logs")
	}

	quiet := startProxy(t, "quiet", proxyConfig{Upstream: up.URL(), Memory: true, Extra: "access_log: false\n"})
	res, err := http.Get(quiet.URL() + "/v1/anything")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	// Access lines are buffered until exit at the latest: stop the proxy so
	// that a line logged against access_log: false would be on stderr.
	quiet.Signal(syscall.SIGTERM)
	if code, ok := quiet.Wait(30 * time.Second); !ok || code != 0 {
		t.Fatalf("after SIGTERM: exited %v, code %d; want exit 0", ok, code)
	}
	if lines := quiet.logLines(map[string]string{"msg": "access"}); len(lines) != 0 {
		t.Errorf("access_log: false logged %d access lines", len(lines))
	}
}

// A record says what request it answered: `keys get` and `keys list` show
// its method, host, path (never the query), route and start.
func TestKeysShowTheRequestAKeyBelongsTo(t *testing.T) {
	up := startUpstream(t)
	p := startAdminProxy(t, up, "store:\n  kind: memory\n")
	before := time.Now().Add(-time.Second)
	if code, _ := keyedPost(t, p, "/v1/charges?card=4242424242424242", "meta-1", false); code == 0 {
		t.Fatal("POST failed")
	}
	hash := loggedKeyHash(t, p.Logs, "executed")
	rec := keysJSON(t, p, "get", hash)
	if rec["method"] != "POST" || rec["path"] != "/v1/charges" || rec["route"] != "default" || rec["host"] == nil {
		t.Errorf("keys get = %v, want method POST, host, path /v1/charges and route default", rec)
	}
	started, err := time.Parse(time.RFC3339Nano, fmt.Sprint(rec["started_at"]))
	if err != nil || started.Before(before) || started.After(time.Now()) {
		t.Errorf("started_at = %v (%v), want when the request came in", rec["started_at"], err)
	}
	list := keysJSON(t, p, "list", "--state", "completed")
	keys, _ := list["keys"].([]any)
	if len(keys) != 1 || keys[0].(map[string]any)["path"] != "/v1/charges" {
		t.Errorf("keys list = %v, want the one record with its path", list)
	}
	if _, out, _ := keysCLI(t, p, "get", hash); strings.Contains(out, "4242") {
		t.Errorf("keys get shows the query string: %s", out)
	}
}

// A key in flight says who holds it: while a slow upstream holds the key,
// `keys get`, `keys list` and GET /admin/keys/{key_hash} show its method,
// host, path (never the query), route, start and the instance (host and
// pid) running it, and a concurrent duplicate's 409 in-flight says since
// when, in started_at and its detail. On every store: each keeps the
// description with its lease in its own way.
func TestKeysShowWhoHoldsAnInFlightKey(t *testing.T) {
	t.Run("memory", func(t *testing.T) { runInFlightHolder(t, "store:\n  kind: memory\n") })
	t.Run("redis", func(t *testing.T) {
		r := redistest.Start(t, "--maxmemory-policy", "noeviction")
		runInFlightHolder(t, fmt.Sprintf("store:\n  kind: redis\n  redis:\n    url: %q\n", r.URL()))
	})
	t.Run("postgres", func(t *testing.T) {
		pg := pgtest.Start(t)
		runInFlightHolder(t, fmt.Sprintf("store:\n  kind: postgres\n  postgres:\n    url: %q\n", pg.URL()))
	})
	t.Run("file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "keys.db")
		runInFlightHolder(t, fmt.Sprintf("store:\n  kind: file\n  file:\n    path: %q\n", path))
	})
}

func runInFlightHolder(t *testing.T, storeYAML string) {
	up := startUpstream(t)
	p := startAdminProxy(t, up, storeYAML)
	const key = "held-charge-1"
	before := time.Now().Add(-time.Second)
	first := make(chan int, 1)
	go func() { code, _ := keyedPost(t, p, "/v1/charges?card=4242424242424242", key, true); first <- code }()
	t.Cleanup(up.Unhold)
	up.WaitCount(key, 1, 10*time.Second)

	hash := keysJSON(t, p, "hash", "--key", key, "--method", "POST", "--path", "/v1/charges", "--host", p.listen,
		"--header", "Authorization: "+clientAuth)["key_hash"].(string)
	host, _ := os.Hostname()
	instance := host + "/" + strconv.Itoa(p.PID())
	got := keysJSON(t, p, "get", hash)
	if got["state"] != "in_flight" || got["method"] != "POST" || got["path"] != "/v1/charges" || got["route"] != "default" ||
		got["host"] != "127.0.0.1" || got["instance"] != instance {
		t.Errorf("keys get = %v, want in_flight POST /v1/charges on route default, host 127.0.0.1, held by %s", got, instance)
	}
	if _, ok := got["trace_id"]; ok {
		t.Errorf("keys get = %v, want no trace_id with tracing off", got)
	}
	since := fmt.Sprint(got["started_at"])
	started, err := time.Parse(time.RFC3339Nano, since)
	if err != nil || started.Before(before) || started.After(time.Now()) {
		t.Errorf("started_at = %q (%v), want when the request came in", since, err)
	}

	req, _ := http.NewRequest("GET", p.AdminURL()+"/admin/keys/"+hash, nil)
	req.Header.Set("Authorization", "Bearer "+runbookToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var api map[string]any
	err = json.NewDecoder(res.Body).Decode(&api)
	res.Body.Close()
	if err != nil || api["instance"] != instance || api["started_at"] != since || api["path"] != "/v1/charges" {
		t.Errorf("GET /admin/keys/%s = %v, %v; want what keys get printed", hash, api, err)
	}
	listed := keysJSON(t, p, "list", "--state", "in_flight")
	if keys, _ := listed["keys"].([]any); len(keys) != 1 || keys[0].(map[string]any)["instance"] != instance ||
		keys[0].(map[string]any)["started_at"] != since {
		t.Errorf("keys list --state in_flight = %v, want the held key with its instance and start", listed)
	}

	code, body := keyedPost(t, p, "/v1/charges?card=4242424242424242", key, false)
	var problem map[string]any
	if err := json.Unmarshal([]byte(body), &problem); err != nil || code != http.StatusConflict || problem["started_at"] != since {
		t.Errorf("duplicate: %d %s, want 409 in-flight with started_at %s", code, body, since)
	}
	if d := fmt.Sprint(problem["detail"]); !strings.Contains(d, "running since "+since+",") {
		t.Errorf("409 detail %q does not say since %s", d, since)
	}
	for what, out := range map[string]string{"the 409": body, "keys get": fmt.Sprint(got), "the logs": p.Logs()} {
		if strings.Contains(out, "4242424242424242") {
			t.Errorf("%s shows the query string", what)
		}
	}
	up.Unhold()
	if code := <-first; code != http.StatusCreated {
		t.Errorf("the held request: %d, want 201", code)
	}
}
