package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
)

// adminGet sends GET path to the admin listener with a bearer token ("" for none).
func (p *proc) adminGet(t *testing.T, path, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+p.admin+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func TestAdminAPIIsOffUnlessATokenIsSet(t *testing.T) {
	up, _ := countingUpstream(t)
	p := start(t, nil, "--upstream", up.URL)
	for _, path := range []string{"/admin/keys", "/admin/keys/ab12", "/debug/pprof/"} {
		if code, _ := p.adminGet(t, path, "anything"); code != http.StatusNotFound {
			t.Errorf("%s = %d without admin.token, want 404", path, code)
		}
	}
	on := start(t, []string{"IDEMPOTENCY_PROXY_ADMIN_TOKEN=t0k"}, "--upstream", up.URL)
	if code, _ := on.adminGet(t, "/admin/keys", ""); code != http.StatusUnauthorized {
		t.Errorf("/admin/keys without the token = %d, want 401", code)
	}
	if code, body := on.adminGet(t, "/admin/keys", "t0k"); code != http.StatusOK || !strings.Contains(body, `"keys"`) {
		t.Errorf("/admin/keys with the token = %d %q", code, body)
	}
}

// A token set from a Secret written by echo ends in a newline: the API
// takes it without, as it takes a token file's, and the keys command with
// the same variable gets in.
func TestTokenFromTheEnvironmentIgnoresSurroundingWhitespace(t *testing.T) {
	up, _ := countingUpstream(t)
	env := []string{"IDEMPOTENCY_PROXY_ADMIN_TOKEN=t0k\n"}
	p := start(t, env, "--upstream", up.URL)
	if code, body := p.adminGet(t, "/admin/keys", "t0k"); code != http.StatusOK {
		t.Errorf("/admin/keys with the token = %d %q, want 200", code, body)
	}
	if code, out, errs := runBinary(t, env, "keys", "list", "--admin", "http://"+p.admin); code != 0 || !strings.Contains(out, `"keys"`) {
		t.Errorf("keys list with the same variable: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

func TestPProfIsServedBehindTheToken(t *testing.T) {
	up, _ := countingUpstream(t)
	env := []string{"IDEMPOTENCY_PROXY_ADMIN_TOKEN=t0k", "IDEMPOTENCY_PROXY_ADMIN_PPROF=true"}
	p := start(t, env, "--upstream", up.URL)
	if code, _ := p.adminGet(t, "/debug/pprof/heap", ""); code != http.StatusUnauthorized {
		t.Errorf("pprof without the token = %d, want 401", code)
	}
	if code, body := p.adminGet(t, "/debug/pprof/goroutine?debug=1", "t0k"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("pprof with the token = %d", code)
	}
}

// The token file is read again on every reload; a file that cannot be read
// then keeps the token in force, and says so.
func TestTokenFileIsReReadOnReload(t *testing.T) {
	up, _ := countingUpstream(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	writeFile(t, tokenFile, "first\n")
	cfg := filepath.Join(dir, "config.yaml")
	writeFile(t, cfg, "upstream:\n  url: "+up.URL+"\nadmin:\n  token_file: "+tokenFile+"\n")
	p := start(t, nil, "--config", cfg)
	if code, _ := p.adminGet(t, "/admin/keys", "first"); code != http.StatusOK {
		t.Fatalf("token from the file: %d, want 200", code)
	}

	writeFile(t, tokenFile, "second\n")
	p.signal(t, syscall.SIGHUP)
	waitFor(t, "the new token", func() bool { code, _ := p.adminGet(t, "/admin/keys", "second"); return code == http.StatusOK })
	if code, _ := p.adminGet(t, "/admin/keys", "first"); code != http.StatusUnauthorized {
		t.Errorf("old token after reload: %d, want 401", code)
	}

	if err := os.Remove(tokenFile); err != nil {
		t.Fatal(err)
	}
	p.signal(t, syscall.SIGHUP)
	waitFor(t, "the token error", func() bool { return strings.Contains(p.logs.String(), "admin token not reloaded") })
	if code, _ := p.adminGet(t, "/admin/keys", "second"); code != http.StatusOK {
		t.Errorf("after an unreadable token file: %d, want the previous token to stay (200)", code)
	}
}

// At start a store that does not answer is logged with its root cause and
// the proxy runs, unready, until it answers.
func TestStartWithTheStoreDownLogsTheCauseAndWaits(t *testing.T) {
	up, _ := countingUpstream(t)
	r := redistest.Start(t)
	r.Kill()
	p := start(t, nil, "--upstream", up.URL, "--redis-url", r.URL())
	waitFor(t, "the start-up store error", func() bool {
		return regexp.MustCompile(`"level":"ERROR","msg":"store unavailable[^\n]*connection refused`).MatchString(p.logs.String())
	})
	if code, body := p.get(t, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "connection refused") {
		t.Errorf("/readyz = %d %q, want 503 with the cause", code, body)
	}
	r.Restart()
	waitFor(t, "ready once Redis answers", func() bool { code, _ := p.get(t, "/readyz"); return code == http.StatusOK })
}

// A Redis that answers PING but refuses every write (a replica) makes the
// proxy unready, naming Redis's reason, for as long as every keyed request
// gets on_store_error; it is ready again once Redis takes writes.
func TestRedisThatRefusesWritesMakesTheProxyUnready(t *testing.T) {
	up, n := countingUpstream(t)
	r := redistest.Start(t)
	p := start(t, nil, "--upstream", up.URL, "--redis-url", r.URL())
	if code, body := p.get(t, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz of a master = %d %q", code, body)
	}
	admin := r.Client(t)
	if err := admin.Do(t.Context(), "REPLICAOF", "127.0.0.1", strconv.Itoa(redistest.FreePort(t))).Err(); err != nil {
		t.Fatal(err)
	}
	if res, _ := p.post(t, "/orders", "k1", "{}"); res.StatusCode != http.StatusServiceUnavailable || n.Load() != 0 {
		t.Fatalf("keyed request to a replica = %d, upstream called %d times; want 503 and no call", res.StatusCode, n.Load())
	}
	if code, body := p.get(t, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "READONLY") {
		t.Errorf("/readyz while Redis refuses writes = %d %q, want 503 naming READONLY", code, body)
	}
	if err := admin.Do(t.Context(), "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	if code, body := p.get(t, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz once Redis takes writes = %d %q, want 200", code, body)
	}
}

// A Redis that may evict keys keeps the proxy ready but is named in
// /readyz, the gauge and an error log with the fix.
func TestUnsafeEvictionIsReportedNotFatal(t *testing.T) {
	up, _ := countingUpstream(t)
	r := redistest.Start(t, "--maxmemory-policy", "allkeys-lru")
	p := start(t, nil, "--upstream", up.URL, "--redis-url", r.URL())
	code, body := p.get(t, "/readyz")
	if code != http.StatusOK || !strings.Contains(body, "eviction unsafe") || !strings.Contains(body, "allkeys-lru") {
		t.Fatalf("/readyz = %d %q, want 200 naming the unsafe policy", code, body)
	}
	if got := p.metric(t, "idempotency_proxy_store_eviction_unsafe"); got != "1" {
		t.Errorf("eviction_unsafe = %q, want 1", got)
	}
	if !regexp.MustCompile(`"level":"ERROR"[^\n]*maxmemory-policy noeviction`).MatchString(p.logs.String()) {
		t.Errorf("no error log with the fix:\n%s", p.logs.String())
	}

	if err := r.Client(t).ConfigSet(t.Context(), "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if code, body := p.get(t, "/readyz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/readyz after the fix = %d %q, want 200 ok", code, body)
	}
	if got := p.metric(t, "idempotency_proxy_store_eviction_unsafe"); got != "0" {
		t.Errorf("eviction_unsafe after the fix = %q, want 0", got)
	}
}

// A token file named in the configuration must be readable at start: the
// proxy does not start with its admin API silently off, and --check says so.
func TestUnreadableTokenFileStopsStartAndFailsCheck(t *testing.T) {
	up, _ := countingUpstream(t)
	missing := filepath.Join(t.TempDir(), "no-such-token")
	env := []string{"IDEMPOTENCY_PROXY_ADMIN_TOKEN_FILE=" + missing}
	code, _, errs := runBinary(t, env, "--upstream", up.URL, "--listen", freeAddr(t), "--admin-listen", freeAddr(t))
	if code != 1 || !strings.Contains(errs, "admin.token_file") {
		t.Fatalf("start: exit %d, stderr %q; want 1 naming admin.token_file", code, errs)
	}
	code, out, _ := runBinary(t, env, "--upstream", up.URL, "--check")
	if code != 1 || !regexp.MustCompile(`FAIL +admin +admin.token_file`).MatchString(out) {
		t.Fatalf("--check: exit %d\n%s\nwant 1 and a FAIL admin line", code, out)
	}
}

// A full memory store keeps the proxy ready, named in /readyz and in the
// store_full gauge, and its size is on /metrics.
func TestFullMemoryStoreIsNamedInReadyz(t *testing.T) {
	up, _ := countingUpstream(t)
	p := start(t, []string{"IDEMPOTENCY_PROXY_STORE_MEMORY_MAX_BYTES=4KiB"}, "--upstream", up.URL)
	if _, body := p.get(t, "/readyz"); body != "ok\n" {
		t.Fatalf("/readyz of an empty store = %q", body)
	}
	full := false
	for i := 0; i < 200 && !full; i++ {
		res, body := p.post(t, "/charge", "fill-"+strconv.Itoa(i), strings.Repeat("x", 100))
		if full = res.StatusCode == http.StatusServiceUnavailable; full {
			if !strings.Contains(body, "/problems/store-full") || res.Header.Get("Retry-After") != "5" {
				t.Fatalf("new key on a full store: %d (Retry-After %q) %s, want 503 store-full with Retry-After: 5",
					res.StatusCode, res.Header.Get("Retry-After"), body)
			}
		}
	}
	if !full {
		t.Fatal("a 4KiB memory store never filled up")
	}
	code, body := p.get(t, "/readyz")
	if code != http.StatusOK || !strings.Contains(body, "store full") {
		t.Fatalf("/readyz of a full store = %d %q, want 200 naming it", code, body)
	}
	if got := p.metric(t, "idempotency_proxy_store_full"); got != "1" {
		t.Errorf("store_full = %q, want 1", got)
	}
	if got := p.metric(t, "idempotency_proxy_store_records"); got == "" || got == "0" {
		t.Errorf("store_records = %q on a full store", got)
	}
}
