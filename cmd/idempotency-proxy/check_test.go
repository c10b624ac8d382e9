package main

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/store/filestore"
)

// checkLines splits --check output into "STATUS what" prefixes, one a check.
func checkLines(t *testing.T, out string) []string {
	t.Helper()
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			t.Fatalf("--check line %q has no status and name", l)
		}
		got = append(got, f[0]+" "+f[1])
	}
	return got
}

func TestCheckPassesWhenStoreAndUpstreamAnswer(t *testing.T) {
	up, execs := countingUpstream(t)
	code, out, errs := runBinary(t, nil, "--upstream", up.URL, "--check")
	if code != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 0", code, out, errs)
	}
	if got := strings.Join(checkLines(t, out), ", "); got != "ok config, ok store, ok upstream" {
		t.Errorf("checks = %s\n%s", got, out)
	}
	// The memory store says what it is, once.
	if !regexp.MustCompile(`(?m)^ok +store +memory, in this process: every lease and record is lost when it exits$`).MatchString(out) {
		t.Errorf("--check on the memory store:\n%s\nwant it described, not named twice", out)
	}
	if execs.Load() != 0 {
		t.Error("--check sent an HTTP request upstream; it must only connect")
	}
}

func TestCheckFailsWhenTheUpstreamRefuses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	code, out, _ := runBinary(t, nil, "--upstream", "http://"+addr, "--check")
	if code != 1 || !strings.Contains(out, "FAIL  upstream") || !strings.Contains(out, "connection refused") {
		t.Fatalf("exit %d, stdout:\n%s\nwant 1 and a FAIL upstream line with the cause", code, out)
	}
}

func TestCheckOfInvalidConfigExits2LikeValidate(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, bad, "upstream:\n  url: http://127.0.0.1:1\ndefaults:\n  ttl: soon\n")
	code, out, errs := runBinary(t, nil, "--config", bad, "--check")
	if code != 2 || !strings.Contains(errs, "defaults.ttl") || out != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 2 naming defaults.ttl, no checks run", code, out, errs)
	}
}

// A route whose methods do not protect the method its match names would
// pass every request it matches through: --validate and --check refuse it
// with exit status 2, naming the route and what to add.
func TestRouteProtectingNoneOfItsRequestsIsRefusedByValidateAndCheck(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, file, "upstream:\n  url: http://127.0.0.1:1\ndefaults:\n  methods: [PUT, PATCH]\nroutes:\n  - match: \"POST /v1/charges\"\n    require_key: true\n")
	for _, args := range [][]string{{"--validate"}, {"--check"}} {
		code, out, errs := runBinary(t, nil, append([]string{"--config", file}, args...)...)
		if code != 2 || !strings.Contains(errs, `routes[0].match: route "POST /v1/charges" matches POST requests alone`) || !strings.Contains(errs, "add POST to its methods") || out != "" {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q; want 2 naming routes[0].match and the fix, nothing run", args, code, out, errs)
		}
	}
}

// The variable of a Secret without its key is empty: the binary refuses it
// rather than check, and then run, a memory store of its own.
func TestStoreAddressGivenEmptyIsRefusedNotRunInMemory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, file, "upstream:\n  url: http://127.0.0.1:1\nstore:\n  redis:\n    url: redis://127.0.0.1:1/0\n")
	for _, args := range [][]string{{"--check"}, {"--validate"}} {
		code, out, errs := runBinary(t, []string{"IDEMPOTENCY_PROXY_STORE_REDIS_URL="}, append([]string{"--config", file}, args...)...)
		if code != 2 || !strings.Contains(errs, "store.redis.url: empty") || !strings.Contains(errs, "IDEMPOTENCY_PROXY_STORE_REDIS_URL") || out != "" {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q; want 2 naming store.redis.url and its variable, nothing run", args, code, out, errs)
		}
	}
}

// A variable in another case than the proxy reads is refused, not ignored.
func TestVariableSpelledInAnotherCaseStopsTheStart(t *testing.T) {
	code, out, errs := runBinary(t, []string{"idempotency_proxy_defaults_require_key=true"}, "--upstream", "http://127.0.0.1:1", "--validate")
	if code != 2 || !strings.Contains(errs, "idempotency_proxy_defaults_require_key: unknown environment variable; did you mean IDEMPOTENCY_PROXY_DEFAULTS_REQUIRE_KEY?") || out != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 2 naming the variable and its spelling", code, out, errs)
	}
}

func TestCheckReportsRedisVersionAndEvictionPolicy(t *testing.T) {
	up, _ := countingUpstream(t)
	safe := redistest.Start(t, "--maxmemory-policy", "noeviction")
	code, out, errs := runBinary(t, nil, "--upstream", up.URL, "--redis-url", safe.URL(), "--check")
	if code != 0 || !regexp.MustCompile(`ok +store +.*redis \d+\.\d+.*maxmemory-policy noeviction`).MatchString(out) {
		t.Fatalf("noeviction: exit %d\n%s%s\nwant 0 and the server version and policy", code, out, errs)
	}

	unsafe := redistest.Start(t, "--maxmemory-policy", "allkeys-lru")
	code, out, _ = runBinary(t, nil, "--upstream", up.URL, "--redis-url", unsafe.URL(), "--check")
	if code != 0 || !regexp.MustCompile(`WARN +store +.*allkeys-lru.*noeviction`).MatchString(out) {
		t.Fatalf("allkeys-lru: exit %d\n%s\nwant 0 with a WARN store line naming the fix", code, out)
	}
}

func TestCheckFailsWithTheStoresRootCause(t *testing.T) {
	up, _ := countingUpstream(t)
	locked := redistest.Start(t)
	// Set after start: redistest waits for an unauthenticated PING.
	if err := locked.Client(t).ConfigSet(t.Context(), "requirepass", "secret").Err(); err != nil {
		t.Fatal(err)
	}
	down := redistest.Start(t)
	downURL := down.URL()
	down.Kill()
	for name, tc := range map[string]struct{ url, cause string }{
		"refused": {downURL, "connection refused"},
		"noauth":  {locked.URL(), "NOAUTH"},
		"bad db":  {"redis://:secret@" + locked.Addr() + "/99", "DB index is out of range"},
	} {
		t.Run(name, func(t *testing.T) {
			code, out, _ := runBinary(t, nil, "--upstream", up.URL, "--redis-url", tc.url, "--check")
			if code != 1 || !regexp.MustCompile(`FAIL +store .*`+tc.cause).MatchString(out) {
				t.Fatalf("exit %d\n%s\nwant 1 and a FAIL store line naming %q", code, out, tc.cause)
			}
			if strings.Contains(out, "secret") {
				t.Errorf("the Redis password was printed:\n%s", out)
			}
		})
	}
}

// --check on Postgres names the server's version and whether the table
// exists, creates nothing, never prints the password, and fails with the
// cause when the database does not answer.
func TestCheckReportsPostgresVersionAndTable(t *testing.T) {
	up, _ := countingUpstream(t)
	pg := pgtest.Start(t)
	code, out, errs := runBinary(t, nil, "--upstream", up.URL, "--postgres-url", pg.URL(), "--check")
	if code != 0 || !regexp.MustCompile(`ok +store +postgres://postgres:xxxxx@.* table idempotency_keys: postgres 15\.\d+; table idempotency_keys does not exist yet`).MatchString(out) {
		t.Fatalf("exit %d\n%s%s\nwant 0, the server version and a table not created yet", code, out, errs)
	}
	if strings.Contains(out+errs, pg.Password()) {
		t.Errorf("the Postgres password was printed:\n%s%s", out, errs)
	}
	if _, err := pg.Conn(t).Exec(t.Context(), `CREATE TABLE idempotency_keys (key text)`); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runBinary(t, nil, "--upstream", up.URL, "--postgres-url", pg.URL(), "--check")
	if code != 1 || !regexp.MustCompile(`FAIL +store .*table idempotency_keys.*another shape.*no column token`).MatchString(out) {
		t.Fatalf("exit %d\n%s\nwant 1 and a FAIL store line naming the table and what differs", code, out)
	}
	// The proxy itself refuses to start on it rather than write into it.
	code, _, errs = runBinary(t, nil, "--upstream", up.URL, "--postgres-url", pg.URL(), "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	if code != 1 || !strings.Contains(errs, "table idempotency_keys") || !strings.Contains(errs, "another shape") {
		t.Fatalf("start on another table: exit %d, stderr:\n%s\nwant 1 naming the table", code, errs)
	}

	pg.Stop()
	code, out, _ = runBinary(t, nil, "--upstream", up.URL, "--postgres-url", pg.URL(), "--check")
	if code != 1 || !regexp.MustCompile(`FAIL +store .*(connect|refused)`).MatchString(out) || strings.Contains(out, pg.Password()) {
		t.Fatalf("database stopped: exit %d\n%s\nwant 1 and a FAIL store line with the cause, without the password", code, out)
	}
}

// TestCheckOfTheFileStore: --check names the engine and the store's size,
// and a directory the running proxy holds (a startup probe runs --check in
// the proxy's container) is the store working, not a failure.
func TestCheckOfTheFileStore(t *testing.T) {
	up, _ := countingUpstream(t)
	dir := t.TempDir()
	code, out, errs := runBinary(t, nil, "--upstream", up.URL, "--store-path", dir, "--check")
	if code != 0 || !regexp.MustCompile(`ok +store +file .*: bbolt v1\.\d+\.\d+; 0 records`).MatchString(out) {
		t.Fatalf("free directory: exit %d\n%s%s\nwant 0 naming bbolt and the records held", code, out, errs)
	}

	held, err := filestore.Open(filestore.Options{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	code, out, errs = runBinary(t, nil, "--upstream", up.URL, "--store-path", dir, "--check")
	if code != 0 || !regexp.MustCompile(`ok +store +file `+regexp.QuoteMeta(dir)+`: open in the running proxy \(pid `+strconv.Itoa(os.Getpid())+`\)\n`).MatchString(out) ||
		strings.Contains(out, "in use by another process") {
		t.Fatalf("directory held by a proxy: exit %d\n%s%s\nwant 0 naming the holder's pid, in words that do not read as a failure", code, out, errs)
	}
}

// A Postgres URL without sslmode is dialled twice, with TLS and without
// (pgx's sslmode=prefer); a refused connection is said once, not once an
// attempt.
func TestCheckSaysARefusedPostgresConnectionOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	code, out, _ := runBinary(t, nil, "--upstream", "http://"+addr, "--postgres-url", "postgres://idem:secret@"+addr+"/app", "--check")
	var storeLine string
	for l := range strings.Lines(out) {
		if strings.HasPrefix(l, "FAIL  store") {
			storeLine = l
		}
	}
	if code != 1 || strings.Count(out, "connection refused") != 2 || strings.Count(storeLine, "connection refused") != 1 || strings.Contains(storeLine, "\t") {
		t.Errorf("exit %d, stdout:\n%s\nwant 1 and one store line saying the connection was refused once (the other is the upstream's)", code, out)
	}
}

// --validate prints each problem of the file at its line, a YAML syntax
// error at the line that breaks it.
func TestValidateNamesTheFileLine(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "upstream:\n  url: http://127.0.0.1:1\ndefaults:\n  ttl: soon\n")
	if code, _, errs := runBinary(t, nil, "--config", bad, "--validate"); code != 2 ||
		!strings.Contains(errs, "\n  "+bad+`:4: defaults.ttl: invalid duration "soon"`) {
		t.Errorf("bad value: exit %d, stderr %q; want 2 and %s:4", code, errs, bad)
	}
	writeFile(t, bad, "upstream:\n  url: http://127.0.0.1:1\n timeout: 5s\n")
	if code, _, errs := runBinary(t, nil, "--config", bad, "--validate"); code != 2 ||
		!strings.Contains(errs, "\n  "+bad+`:3: did not find expected key, at " timeout: 5s"`) {
		t.Errorf("bad indentation: exit %d, stderr %q; want 2 and %s:3 quoting the line", code, errs, bad)
	}
}
