package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// problemLines loads src and returns its problems one per line; it fails the
// test if Load accepted the configuration.
func problemLines(t *testing.T, src Source) []string {
	t.Helper()
	cfg, err := Load(src)
	if err == nil {
		t.Fatalf("Load accepted an invalid configuration: %+v", cfg)
	}
	if cfg != nil {
		t.Errorf("Load returned a config with an error")
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("errors.Is(err, ErrInvalid) = false for %v", err)
	}
	return strings.Split(fileLine.ReplaceAllString(err.Error(), ""), "\n")
}

// fileLine is the "file:line: " a problem of a file's value starts with;
// problemLines leaves it out, TestProblemsNameTheLineInTheFile checks it.
var fileLine = regexp.MustCompile(`(?m)^[^ :]+\.yaml:\d+: `)

type invalidCase struct {
	file string
	want []string
}

// invalidFiles has one testdata file per class of mistake, with the exact
// messages an operator sees on stderr.
var invalidFiles = []invalidCase{
	{"invalid-unknown-key.yaml", []string{
		"upstream.retries: unknown key",
		"defaults.tll: unknown key; did you mean ttl?",
		"routes[2].tll: unknown key; did you mean ttl?",
		"lisen: unknown key; did you mean listen?",
	}},
	{"invalid-duration.yaml", []string{
		`upstream.timeout: invalid duration "30" (want e.g. 250ms, 30s, 24h)`,
		`defaults.lock_ttl: invalid duration "3x" (want e.g. 250ms, 30s, 24h)`,
		`routes[1].ttl: invalid duration "3x" (want e.g. 250ms, 30s, 24h)`,
	}},
	{"invalid-size.yaml", []string{
		`store.memory.max_bytes: invalid size "10MB" (want bytes, or a KiB, MiB or GiB suffix)`,
		`defaults.max_request_body: invalid size "-1" (want bytes, or a KiB, MiB or GiB suffix)`,
		`defaults.max_response_body: invalid size "1.5MiB" (want bytes, or a KiB, MiB or GiB suffix)`,
	}},
	{"invalid-url.yaml", []string{
		`upstream.url: scheme must be http or https, not "ftp"`,
	}},
	{"invalid-url-host.yaml", []string{
		`upstream.url: missing host in "http:///no-host"`,
	}},
	{"invalid-url-syntax.yaml", []string{
		`upstream.url: invalid URL "http://[::1": missing ']' in host`,
	}},
	{"invalid-access-log.yaml", []string{
		`access_log_fields[2]: must be one of method, path, route, status, outcome, duration_seconds, bytes, key_hash, reconcile_probes, upstream_seconds, client_addr, user_agent, request_id, protocol; got "user_agnet" (did you mean user_agent?)`,
		`access_log_fields[3]: must be one of method, path, route, status, outcome, duration_seconds, bytes, key_hash, reconcile_probes, upstream_seconds, client_addr, user_agent, request_id, protocol; got "client_adr" (did you mean client_addr?)`,
		`trusted_proxies[1]: invalid CIDR "10.0.0/8" (want a range such as 10.0.0.0/8 or fd00::/8, or one address)`,
		`trusted_proxies[2]: invalid CIDR "fd00::/200" (want a range such as 10.0.0.0/8 or fd00::/8, or one address)`,
	}},
	{"invalid-missing-upstream.yaml", []string{
		"upstream.url: required: set it with --upstream or IDEMPOTENCY_PROXY_UPSTREAM_URL (e.g. http://127.0.0.1:3000)",
	}},
	// Policy words are decoded by the handler's own parsers, so they come
	// with the other decoding problems, before the semantic ones.
	{"invalid-policy-word.yaml", []string{
		`log_level: must be one of debug, info, warn, error; got "verbose"`,
		`defaults.concurrent: must be one of reject, wait; got "queue"`,
		`defaults.on_store_error: must be one of fail_closed, fail_open; got "ignore"`,
		`routes[0].on_upstream_error: must be one of release, keep, reconcile; got "retry"`,
		`store.kind: must be one of memory, redis, postgres, file; got "etcd"`,
	}},
	// A near miss of a word, a URL without its scheme and a "- header:"
	// mapping each say the fix, and only once.
	{"invalid-hints.yaml", []string{
		`log_level: must be one of debug, info, warn, error; got "warning" (did you mean warn?)`,
		`upstream.url: invalid URL "127.0.0.1:3200": first path segment in URL cannot contain colon; add the scheme: "http://127.0.0.1:3200"`,
		`store.memory.when_full: must be one of reject, evict_oldest; got "evict-oldest" (did you mean evict_oldest?)`,
		`defaults.on_store_error: must be one of fail_closed, fail_open; got "fail-open" (did you mean fail_open?)`,
		`routes[2].key_sources[0]: must be a string, not a mapping; in YAML "- header: X-Cart-Id" is a mapping: write "header:X-Cart-Id" without the space, or quote it`,
		`store.kind: must be one of memory, redis, postgres, file; got "reddis" (did you mean redis?)`,
	}},
	{"invalid-url-scheme-missing.yaml", []string{
		`upstream.url: scheme must be http or https, not "localhost"; add the scheme: "http://localhost:3200/v1"`,
	}},
	// A kind is never guessed: a near miss says which one it is close to.
	{"invalid-store-kind.yaml", []string{
		`store.kind: must be one of memory, redis, postgres, file; got "rediss" (did you mean redis?)`,
	}},
	// Two stores' addresses and no kind: the proxy does not pick one.
	{"invalid-store-ambiguous.yaml", []string{
		"store.kind: store.redis.url and store.postgres.url are both set: set store.kind to the one to use",
	}},
	// The password is never quoted back.
	{"invalid-postgres.yaml", []string{
		`store.postgres.max_conns: must be a whole number, not "many"`,
		`store.postgres.url: scheme must be postgres or postgresql, not "mysql"`,
		`store.postgres.table: invalid table name "bad-name" (want a name, or schema.name, of letters, digits and _)`,
		"store.postgres.timeout: must be > 0, not 0s",
	}},
	{"invalid-postgres-url.yaml", []string{
		"store.postgres.url: invalid URL",
	}},
	{"invalid-postgres-option.yaml", []string{
		`store.postgres.cache_bytes: invalid size "-1" (want bytes, or a KiB, MiB or GiB suffix)`,
		"store.postgres.url: invalid URL: sslmode is invalid",
		"store.postgres.max_conns: must be >= 1, not 0",
	}},
	{"invalid-lock-ttl.yaml", []string{
		"routes[0].lock_ttl: 40s (from defaults) exceeds ttl 30s: lower lock_ttl or raise ttl",
	}},
	// Routes that inherit the mistake do not repeat it.
	{"invalid-lock-ttl-defaults.yaml", []string{
		"defaults.lock_ttl: 30s (built-in default) exceeds ttl 10s: lower lock_ttl or raise ttl",
	}},
	{"invalid-wait-timeout.yaml", []string{
		"defaults.wait_timeout: must be > 0 when concurrent is wait",
		"routes[0].wait_timeout: must not be negative (-1s)",
	}},
	{"invalid-route-match.yaml", []string{
		`routes[0].match: required (a ServeMux pattern such as "POST /v1/charges" or "/v1/")`,
		"routes[2].match: duplicate of routes[1]",
		`routes[3].match: invalid pattern "/a/{x": at offset 3: bad wildcard segment (must end with '}')`,
		`routes[4].match: invalid pattern "GET example.com /x" (want [METHOD ][HOST]/PATH)`,
	}},
	{"invalid-route-methods.yaml", []string{
		`routes[0].match: route "POST /v1/charges" matches POST requests alone, and its methods [PUT PATCH] (from defaults) protect none: add POST to its methods, or set enabled: false for a plain pass-through`,
		`routes[1].methods: route "POST /v1/refunds" matches POST requests alone, and its methods [PUT] protect none: add POST to its methods, or set enabled: false for a plain pass-through`,
	}},
	{"invalid-route-conflict.yaml", []string{
		`routes[1].match: pattern "/a/{y}" conflicts with routes[0] "/a/{x}": /a/{y} matches the same requests as /a/{x}`,
		`routes[3].match: pattern "/b/new" conflicts with routes[2] "GET /b/{id}": /b/new matches more methods than GET /b/{id}, but has a more specific path pattern`,
	}},
	{"invalid-redis-missing.yaml", []string{
		"store.kind: redis needs store.redis.url or store.redis.addrs: set --redis-url or IDEMPOTENCY_PROXY_STORE_REDIS_URL",
		"store.redis.master_name: needs store.redis.addrs (the Sentinel addresses)",
	}},
	{"invalid-redis-conflict.yaml", []string{
		`store.redis.url: scheme must be redis or rediss, not "http"`,
		"store.redis.addrs: set either store.redis.url or store.redis.addrs, not both",
		`store.redis.addrs[1]: invalid address "no-port" (want host:port)`,
		"store.redis.key_prefix: must not contain { or }",
		"store.redis.timeout: must be > 0, not 0s",
	}},
	// A value of the wrong shape is reported once, not again as missing.
	{"invalid-types.yaml", []string{
		"listen: must be a string, not a list",
		"upstream: must be a mapping, not a string",
		"store.memory: must be a mapping, not a number",
		`defaults.require_key: must be true or false, not "maybe"`,
		"defaults.scope_headers: must be a list, not a mapping",
		"routes: must be a list, not a mapping",
	}},
	{"invalid-max-execution.yaml", []string{
		"upstream.max_execution: must be at least upstream.timeout (1m0s), not 30s: a call must be allowed to run as long as its client waits",
		"upstream.max_detached: must be > 0, not 0",
		"upstream.max_detached_bytes: must be > 0, not 0",
	}},
	{"invalid-values.yaml", []string{
		`defaults.release_statuses[1]: invalid HTTP status "600" (want 100..599)`,
		`defaults.release_statuses[2]: invalid HTTP status "abc" (want 100..599)`,
		`listen: invalid address "8080" (want host:port, e.g. :8080)`,
		`admin_listen: invalid port "99999"`,
		"shutdown_timeout: must be > 0, not 0s",
		"upstream.timeout: must be > 0, not -1s",
		"store.memory.max_bytes: must be > 0, not 0",
		`defaults.header: invalid header name "Idempotency Key"`,
		`defaults.methods[1]: invalid method "P/T"`,
		"defaults.ttl: must be > 0, not 0s",
		"defaults.max_request_body: must be > 0, not 0",
		`defaults.fingerprint_headers[1]: invalid header name "bad header"`,
	}},
	{"invalid-same-listen.yaml", []string{
		"admin_listen: same address as listen (:8080)",
	}},
	{"invalid-when-full.yaml", []string{
		`store.memory.when_full: must be one of reject, evict_oldest; got "evict_newest" (did you mean evict_oldest?)`,
	}},
	{"invalid-grpc-words.yaml", []string{
		`upstream.protocol: must be one of http1, h2c, auto; got "http2" (did you mean http1?)`,
		`defaults.release_grpc_statuses[0]: must be one of OK, CANCELLED, UNKNOWN, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, ABORTED, OUT_OF_RANGE, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS, UNAUTHENTICATED; got "UNAVAILIBLE" (did you mean UNAVAILABLE?)`,
	}},
	{"invalid-keys-file.yaml", []string{
		`store.encryption.keys_file: testdata/keys-short.txt:2: key "2026-01" is 24 bytes after decoding, want 32 (openssl rand -base64 32)`,
	}},
	{"invalid-keys-file-missing.yaml", []string{
		"store.encryption.keys_file: testdata/no-such-keys-file: cannot read: no such file or directory",
	}},
	{"invalid-admin-token.yaml", []string{
		"admin.token_file: set admin.token or admin.token_file, not both",
	}},
	// Two patterns that differ only in case are one route to a
	// case-insensitive match.
	{"invalid-paths.yaml", []string{
		`defaults.ambiguous_paths: must be one of reject, allow; got "sometimes"`,
		`defaults.path_case: must be one of sensitive, insensitive; got "ignore"`,
	}},
	{"invalid-status-ttl.yaml", []string{
		`defaults.status_ttl.404: must be > 0, not 0s`,
		`defaults.status_ttl.6xx: invalid status "6xx" (want a status 100..599 or a class 1xx..5xx)`,
		`routes[0].status_ttl.40: invalid status "40" (want a status 100..599 or a class 1xx..5xx)`,
	}},
	{"invalid-status-ttl-value.yaml", []string{
		`defaults.status_ttl.200: invalid duration "soon" (want e.g. 250ms, 30s, 24h)`,
		`routes[0].status_ttl: must be a mapping, not a list`,
	}},
	{"invalid-path-case.yaml", []string{
		`routes[2].match: pattern "/v1/charges" is routes[0] "/V1/charges" but for case, which path_case insensitive cannot tell apart`,
	}},
	// Profiles and the command line are not served to every interface
	// without a token.
	{"invalid-pprof-open.yaml", []string{
		`admin.pprof: true without admin.token or admin.token_file serves profiles, and the command line, to anyone who reaches admin_listen ":9090": set admin.token (or admin.token_file), or bind admin_listen to a loopback address such as 127.0.0.1:9090`,
	}},
	// "cookie:session" is valid: one cookie's value scopes the key.
	{"invalid-scope-cookie.yaml", []string{
		`defaults.scope_headers[1]: invalid cookie name "bad name" in "Cookie:bad name"`,
		`defaults.scope_headers[2]: invalid cookie name "" in "Cookie:"`,
		`defaults.scope_headers[3]: invalid header name "X-Tenant:id" (or Cookie:NAME for one cookie)`,
	}},
	// A route's own key in conflict with an inherited value names where
	// that value came from; routes[0] inherits both and is fine.
	{"invalid-inherited.yaml", []string{
		"routes[1].lock_ttl: 30s (from defaults) exceeds ttl 5s: lower lock_ttl or raise ttl",
		"routes[2].wait_timeout: must be > 0 when concurrent is wait (from defaults)",
	}},
	{"invalid-near-miss.yaml", []string{
		"upstream.timout: unknown key; did you mean timeout?",
		"admin.tokn: unknown key; did you mean token?",
		"defaults.fingerprint_hosts: unknown key; did you mean fingerprint_host?",
		"defaults.lock_tll: unknown key; did you mean lock_ttl?",
	}},
	{"invalid-new-types.yaml", []string{
		`admin.pprof: must be true or false, not "sometimes"`,
		`tracing.enabled: must be true or false, not "yes please"`,
		`defaults.fingerprint_host: must be true or false, not "2"`,
	}},
	// Key sources are checked one by one; "- header: X" is a YAML mapping.
	// header and key_sources name the same thing: one place sets one.
	{"invalid-key-sources.yaml", []string{
		`routes[0].key_sources[0]: must be a string, not a mapping; in YAML "- header: X-GitHub-Delivery" is a mapping: write "header:X-GitHub-Delivery" without the space, or quote it`,
		`routes[1].key_sources[0]: key source "json:order_id": JSON pointer "order_id" must start with "/" (RFC 6901), as in /id`,
		`routes[1].key_sources[1]: key source "query:": query: needs a parameter name, as in query:idempotency_key`,
		`routes[1].key_sources[2]: key source "form:sid": unknown kind "form": want header:NAME, query:NAME, cookie:NAME, json:/pointer or body_sha256`,
		`routes[1].key_sources[3]: key source "json:/a~2": JSON pointer "/a~2": "~" must be followed by 0 (for "~") or 1 (for "/")`,
		`routes[1].key_sources[4]: key source "body_sha256:x": body_sha256 takes no argument`,
		`routes[1].key_sources[5]: key source "header:Bad Name": "Bad Name" is not a valid header name`,
		"defaults.key_sources: set header or key_sources, not both (header: NAME is the shorthand for key_sources: [header:NAME])",
		"routes[2].key_sources: set header or key_sources, not both (header: NAME is the shorthand for key_sources: [header:NAME])",
	}},
	{"invalid-fingerprint.yaml", []string{
		`defaults.fingerprint_json: must be one of raw, canonical; got "sorted"`,
		`routes[0].fingerprint_ignore[2]: JSON pointer "sent_at" must start with "/" (RFC 6901), as in /id`,
		`routes[0].fingerprint_ignore[3]: JSON pointer "/a~x": "~" must be followed by 0 (for "~") or 1 (for "/")`,
		`routes[2].advertise_expiry: must be true or false, not "sometimes"`,
		`defaults.upstream_control_header: "Idempotency Control" is not a valid header name`,
		`routes[1].fingerprint_ignore[1]: the empty pointer "" names the whole body, which must stay in the fingerprint`,
	}},
	// A lookup that cannot work is refused with the fix, keyed in its block.
	{"invalid-reconcile.yaml", []string{
		`routes[0].reconcile.then: must be one of keep, release; got "retry"`,
		`routes[0].reconcile.request: placeholder {json:order_id}: JSON pointer "order_id" must start with "/" (RFC 6901), as in /id`,
		"routes[0].reconcile.absent: 404 is in both found and absent: an answer says one or the other; remove it from one",
		"routes[0].reconcile.every: must be > 0, not 0s",
		"routes[1].reconcile.request: unknown placeholder {idempotency_key}: use one of {key}, {json:/pointer}, {header:Name}, {query:name}, {path}",
		"routes[1].reconcile.after: 20m0s exceeds reconcile.for 10m0s (from defaults): no probe would ever be sent",
		`routes[2].ambiguous_statuses: 503 is also in release_statuses: a status is either "not processed" (release_statuses) or "unknown" (ambiguous_statuses); remove it from one`,
	}},
	{"invalid-yaml.yaml", []string{
		`did not find expected key, at " bad: ["`,
	}},
}

func TestInvalidFiles(t *testing.T) {
	for _, tt := range invalidFiles {
		t.Run(tt.file, func(t *testing.T) {
			got := problemLines(t, Source{File: filepath.Join("testdata", tt.file)})
			if !slices.Equal(got, tt.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestInvalidFilesCovered keeps the table and testdata in step.
func TestInvalidFilesCovered(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !slices.ContainsFunc(invalidFiles, func(tt invalidCase) bool { return tt.file == filepath.Base(f) }) {
			t.Errorf("%s has no expected problems in invalidFiles", f)
		}
	}
}

// The admin token exported for the keys command, as the operating guide
// suggests, conflicts with a token file: the message names the variable.
func TestAdminTokenConflictNamesTheVariable(t *testing.T) {
	got := problemLines(t, Source{
		File: filepath.Join("testdata", "invalid-admin-token.yaml"),
		Env:  []string{"IDEMPOTENCY_PROXY_ADMIN_TOKEN=from-env"},
	})
	want := []string{"admin.token_file: set admin.token (from IDEMPOTENCY_PROXY_ADMIN_TOKEN) or admin.token_file, not both"}
	if !slices.Equal(got, want) {
		t.Errorf("problems = %q, want %q", got, want)
	}
}

func TestMissingFile(t *testing.T) {
	got := problemLines(t, Source{File: "testdata/does-not-exist.yaml"})
	if len(got) != 1 || !strings.HasPrefix(got[0], "testdata/does-not-exist.yaml: ") {
		t.Errorf("problems = %q, want one located at the file", got)
	}
}

// TestValidateBuiltInCode covers configs built without Load, as the wiring
// or tests of other packages may do.
func TestValidateBuiltInCode(t *testing.T) {
	cfg := Default()
	if err := cfg.Validate(); err == nil || err.Error() != "upstream.url: required: set it with --upstream or IDEMPOTENCY_PROXY_UPSTREAM_URL (e.g. http://127.0.0.1:3000)" {
		t.Errorf("Validate(Default()) = %v, want only the missing upstream", err)
	}
	cfg.Upstream.URL = mustURL(t, "http://127.0.0.1:3000")
	cfg.Routes = []Route{{Match: "/a/", Enabled: true, Policy: clonePolicy(cfg.Defaults)}}
	cfg.Routes[0].ReleaseStatuses = []int{99}
	cfg.Routes[0].MaxResponseBody = -1
	want := "routes[0].release_statuses[0]: invalid HTTP status 99 (want 100..599)\n" +
		"routes[0].max_response_body: must not be negative"
	if err := cfg.Validate(); err == nil || err.Error() != want {
		t.Errorf("Validate() = %v, want\n%s", err, want)
	}
}

// admin.pprof without a token is accepted where only this machine reaches
// it, and anywhere behind a token.
func TestPProfWithoutATokenOnlyOnLoopback(t *testing.T) {
	for _, c := range []struct {
		listen, token string
		ok            bool
	}{
		{"127.0.0.1:9090", "", true},
		{"[::1]:9090", "", true},
		{"localhost:9090", "", true},
		{"127.0.0.2:9090", "", true},
		{":9090", "s3cret", true},
		{":9090", "", false},
		// A blank token is no token: the API and the profiler take it
		// trimmed, as a token file's.
		{":9090", " \t", false},
		{":9090", "s3cret\n", true},
		{"0.0.0.0:9090", "", false},
		{"[::]:9090", "", false},
		{"10.0.0.5:9090", "", false},
	} {
		_, err := Load(Source{Env: []string{
			"IDEMPOTENCY_PROXY_UPSTREAM_URL=http://127.0.0.1:3000",
			"IDEMPOTENCY_PROXY_ADMIN_LISTEN=" + c.listen,
			"IDEMPOTENCY_PROXY_ADMIN_PPROF=true",
			"IDEMPOTENCY_PROXY_ADMIN_TOKEN=" + c.token,
		}})
		if (err == nil) != c.ok {
			t.Errorf("admin_listen %q, token %q: error %v, want accepted=%v", c.listen, c.token, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "admin.pprof") {
			t.Errorf("admin_listen %q: error %v does not name admin.pprof", c.listen, err)
		}
	}
}

// A problem with a value from the file starts with the file and the line
// of its key, as a compiler's does; a value from the environment has no
// line in the file.
func TestProblemsNameTheLineInTheFile(t *testing.T) {
	file := writeYAML(t, `upstream:
  url: http://127.0.0.1:3000
defaults:
  ttl: soon
  tiemout: 3s
routes:
  - match: /a/
    ttl: 1h
    lock_ttl: 2h
`)
	_, err := Load(Source{File: file, Env: []string{"IDEMPOTENCY_PROXY_UPSTREAM_URL=ftp://x"}})
	got := strings.Split(fmt.Sprint(err), "\n")
	want := []string{
		file + `:4: defaults.ttl: invalid duration "soon" (want e.g. 250ms, 30s, 24h)`,
		file + ":5: defaults.tiemout: unknown key",
		file + ":9: routes[0].lock_ttl: 2h0m0s exceeds ttl 1h0m0s: lower lock_ttl or raise ttl",
		`upstream.url: scheme must be http or https, not "ftp" (from IDEMPOTENCY_PROXY_UPSTREAM_URL)`,
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A file that is not YAML is located at the line it stops being YAML on,
// quoted, not at the line yaml names (where the block around it began).
func TestSyntaxErrorNamesTheLineThatBreaksIt(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"upstream:\n  url: http://127.0.0.1:3000\n timeout: 5s\n", `:3: did not find expected key, at " timeout: 5s"`},
		{"upstream:\n  url: http://127.0.0.1:3000\nroutes:\n  - match: /a/\n    ttl: 1h\n   lock_ttl: 2h\n", `:6: did not find expected '-' indicator, at "   lock_ttl: 2h"`},
		{"upstream:\n  url: 'http://127.0.0.1:3000\nlisten: :8080\n", `:2: found unexpected end of stream, at "  url: 'http://127.0.0.1:3000"`},
	} {
		file := writeYAML(t, tc.doc)
		_, err := Load(Source{File: file})
		if want := file + tc.want; fmt.Sprint(err) != want {
			t.Errorf("%q:\n got %v\nwant %s", tc.doc, err, want)
		}
	}
}
