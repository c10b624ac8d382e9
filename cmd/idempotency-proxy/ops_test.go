package main

import (
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
)

// countingUpstream answers each request with its execution number.
func countingUpstream(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strconv.FormatInt(n.Add(1), 10)))
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

var specMetrics = []string{
	"idempotency_proxy_requests_total",
	"idempotency_proxy_request_duration_seconds",
	"idempotency_proxy_upstream_duration_seconds",
	"idempotency_proxy_store_operation_duration_seconds",
	"idempotency_proxy_store_errors_total",
	"idempotency_proxy_inflight_requests",
	"idempotency_proxy_lock_lost_total",
	"idempotency_proxy_build_info",
	"idempotency_proxy_store_eviction_unsafe",
	"idempotency_proxy_store_full",
	"idempotency_proxy_store_bytes",
	"idempotency_proxy_store_records",
	"idempotency_proxy_store_evictions_total",
	"idempotency_proxy_admin_operations_total",
}

func TestMetrics(t *testing.T) {
	up, _ := countingUpstream(t)
	p := start(t, nil, "--upstream", up.URL)
	p.post(t, "/charge", "k1", "{}")
	p.post(t, "/charge", "k1", "{}")
	p.post(t, "/charge", "k1", "other payload")
	p.post(t, "/charge", "", "{}")
	p.post(t, "/charge", strings.Repeat("k", 300), "{}")

	_, text := p.get(t, "/metrics")
	for _, name := range specMetrics {
		if !strings.Contains(text, "# TYPE "+name+" ") {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	for outcome, want := range map[string]string{
		"executed": "1", "replayed": "1", "mismatch": "1", "no_key": "1", "invalid_key": "1", "conflict": "0",
	} {
		series := `idempotency_proxy_requests_total{outcome="` + outcome + `",route="default"}`
		if got := p.metric(t, series); got != want {
			t.Errorf("%s = %q, want %s", series, got, want)
		}
	}
	if got := p.metric(t, `idempotency_proxy_build_info{goversion="`+goVersion()+`",version="v0.0.0-test"}`); got != "1" {
		t.Errorf("build_info = %q, want 1", got)
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if !strings.Contains(text, name) {
			t.Errorf("/metrics lacks the %s collector", name)
		}
	}
}

func TestReadyzFollowsTheStore(t *testing.T) {
	redis := redistest.Start(t)
	up, _ := countingUpstream(t)
	p := start(t, nil, "--upstream", up.URL, "--redis-url", redis.URL())
	ready := func() int { code, _ := p.get(t, "/readyz"); return code }
	waitFor(t, "ready", func() bool { return ready() == http.StatusOK })

	redis.Kill()
	waitFor(t, "not ready while Redis is down", func() bool { return ready() == http.StatusServiceUnavailable })
	if _, body := p.get(t, "/readyz"); !strings.Contains(body, "store unavailable") {
		t.Errorf("/readyz body %q does not say why", body)
	}
	if code, _ := p.get(t, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d while Redis is down, want 200 (liveness is not readiness)", code)
	}
	redis.Restart()
	waitFor(t, "ready again after Redis restarts", func() bool { return ready() == http.StatusOK })
	if got := p.metric(t, `idempotency_proxy_store_errors_total{operation="ping"}`); got == "0" || got == "" {
		t.Errorf("failed pings not counted: %q", got)
	}
}

func TestReload(t *testing.T) {
	up, execs := countingUpstream(t)
	file := filepath.Join(t.TempDir(), "config.yaml")
	config := func(ttl string) string {
		return "upstream:\n  url: " + up.URL + "\nroutes:\n  - match: \"POST /v1/charges\"\n    ttl: " + ttl + "\n    lock_ttl: 100ms\n"
	}
	writeFile(t, file, config("1h"))
	p := start(t, nil, "--config", file, "--log-level", "debug")

	p.post(t, "/v1/charges", "before", "{}")
	p.post(t, "/v1/charges", "before", "{}")
	if got := execs.Load(); got != 1 {
		t.Fatalf("executions with ttl 1h = %d, want 1", got)
	}

	// A shorter ttl applies to new requests: their records expire.
	writeFile(t, file, config("200ms"))
	waitFor(t, "the reload", func() bool { return strings.Contains(p.logs.String(), `"level":"INFO","msg":"config reloaded"`) })
	p.post(t, "/v1/charges", "after", "{}")
	base := execs.Load()
	waitFor(t, "the record to expire under the new ttl", func() bool {
		p.post(t, "/v1/charges", "after", "{}")
		return execs.Load() > base
	})

	// An invalid edit is logged and the running configuration stays.
	writeFile(t, file, config("soon"))
	waitFor(t, "the rejected reload", func() bool {
		return strings.Contains(p.logs.String(), "config reload rejected") && strings.Contains(p.logs.String(), "routes[0].ttl")
	})
	p.post(t, "/v1/charges", "still", "{}")
	if res, _ := p.post(t, "/v1/charges", "still", "{}"); res.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("after an invalid edit the proxy stopped protecting the route")
	}

	// A store change needs a restart, and says so. (Listener addresses
	// here come from flags, which outrank the file.)
	writeFile(t, file, config("200ms")+"store:\n  memory:\n    max_bytes: 1MiB\n")
	p.signal(t, syscall.SIGHUP)
	waitFor(t, "the restart warning", func() bool {
		return strings.Contains(p.logs.String(), "need a restart") && strings.Contains(p.logs.String(), "store.memory.max_bytes")
	})
}

func TestSIGTERMWithNothingInFlightExitsZero(t *testing.T) {
	up, _ := countingUpstream(t)
	p := start(t, nil, "--upstream", up.URL)
	p.signal(t, syscall.SIGTERM)
	if code := p.exitCode(t); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
}

// A request still running at shutdown_timeout is aborted, its client told
// the proxy was shutting down, and its key left locked until lock_ttl, as
// after a crash: the upstream may still be running it, so another proxy on
// the same Redis answers the retry 409 instead of executing it again.
func TestShutdownTimeoutKeepsUnfinishedKeysLocked(t *testing.T) {
	redis := redistest.Start(t)
	arrived, release := make(chan struct{}, 4), make(chan struct{})
	var execs atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if execs.Add(1) == 1 {
			arrived <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done(): // the proxy aborted the call
			}
			return
		}
		w.Write([]byte("second"))
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(release) }) // before up.Close, which waits for handlers
	env := []string{"IDEMPOTENCY_PROXY_SHUTDOWN_TIMEOUT=300ms", "IDEMPOTENCY_PROXY_DEFAULTS_LOCK_TTL=1h", "IDEMPOTENCY_PROXY_DEFAULTS_TTL=2h"}
	a := start(t, env, "--upstream", up.URL, "--redis-url", redis.URL())
	b := start(t, env, "--upstream", up.URL, "--redis-url", redis.URL())

	type answer struct {
		code int
		body string
	}
	firstDone := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("POST", "http://"+a.listen+"/x", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "k")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			firstDone <- answer{}
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		firstDone <- answer{res.StatusCode, string(b)}
	}()
	<-arrived
	a.signal(t, syscall.SIGTERM)
	if code := a.exitCode(t); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	if got := <-firstDone; got.code != http.StatusBadGateway || !strings.Contains(got.body, "The proxy was shutting down") {
		t.Errorf("aborted request got %d %q, want a 502 saying the proxy was shutting down", got.code, got.body)
	}
	res, body := b.post(t, "/x", "k", "{}")
	if res.StatusCode != http.StatusConflict || !strings.Contains(body, "in-flight") {
		t.Fatalf("retry on the other proxy: %d %q, want 409 in-flight (the key stays locked until lock_ttl)", res.StatusCode, body)
	}
	if n := execs.Load(); n != 1 {
		t.Errorf("executions = %d, want 1", n)
	}
	if !strings.Contains(a.logs.String(), "shutdown_timeout reached") {
		t.Error("the abort was not logged")
	}
}

// access_log_fields and trusted_proxies are reloaded live: the lines of
// requests after the edit have the new fields, with no restart warning.
func TestAccessLogFieldsReloadLive(t *testing.T) {
	up, _ := countingUpstream(t)
	file := filepath.Join(t.TempDir(), "config.yaml")
	config := func(fields string) string {
		return "upstream:\n  url: " + up.URL + "\naccess_log_fields: [" + fields + "]\ntrusted_proxies: [127.0.0.1]\n"
	}
	writeFile(t, file, config("path, status"))
	p := start(t, nil, "--config", file)
	p.post(t, "/before", "", "{}")
	waitFor(t, "the access line with path and status only", func() bool {
		return strings.Contains(p.logs.String(), `"msg":"access","path":"/before","status":200}`)
	})
	writeFile(t, file, config("path, client_addr"))
	waitFor(t, "the reload", func() bool { return strings.Contains(p.logs.String(), `"msg":"config reloaded"`) })
	p.post(t, "/after", "", "{}")
	waitFor(t, "the access line with the reloaded fields", func() bool {
		return strings.Contains(p.logs.String(), `"msg":"access","path":"/after","client_addr":"127.0.0.1"}`)
	})
	if strings.Contains(p.logs.String(), "need a restart") {
		t.Errorf("the fields' reload asked for a restart:\n%s", p.logs.String())
	}
}

// A file being rewritten can be read empty, and an emptied file is a
// mistake: read as "every key at its default" it would drop every route.
// The reload is rejected and the configuration in force stays.
func TestEmptiedConfigFileKeepsTheConfigurationInForce(t *testing.T) {
	up, execs := countingUpstream(t)
	file := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, file, "routes:\n  - match: \"POST /v1/charges\"\n    require_key: true\n")
	p := start(t, nil, "--config", file, "--upstream", up.URL)

	for i, body := range []string{"", "# every line commented out\n"} {
		writeFile(t, file, body)
		waitFor(t, "the rejected reload", func() bool {
			return strings.Count(p.logs.String(), "holds no configuration") > i
		})
		if res, _ := p.post(t, "/v1/charges", "", "{}"); res.StatusCode != http.StatusBadRequest {
			t.Fatalf("after the file was emptied (%q), a charge without a key got %d, want 400: the route was dropped", body, res.StatusCode)
		}
	}
	if got := execs.Load(); got != 0 {
		t.Errorf("upstream executions = %d, want 0", got)
	}
	if strings.Contains(p.logs.String(), `"msg":"config reloaded"`) {
		t.Errorf("an emptied file was reloaded:\n%s", p.logs.String())
	}
}

// A keys file that a reload names (encryption turned on, or the file
// moved) is watched from then on as the one the proxy started with is: a
// rotation written to it is in force without a signal.
func TestKeysFileNamedByAReloadIsWatched(t *testing.T) {
	up, _ := countingUpstream(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "config.yaml")
	// The keys in a directory of their own, as a Secret volume beside a
	// ConfigMap's.
	keys := filepath.Join(t.TempDir(), "keys")
	key := func(id string) string { return id + " " + base64.StdEncoding.EncodeToString(make([]byte, 32)) + "\n" }
	writeFile(t, keys, key("k1"))
	writeFile(t, file, "upstream:\n  url: "+up.URL+"\n")
	p := start(t, nil, "--config", file)

	writeFile(t, file, "upstream:\n  url: "+up.URL+"\nstore:\n  encryption:\n    keys_file: "+keys+"\n")
	waitFor(t, "encryption on by the reload", func() bool { return strings.Contains(p.logs.String(), `"seals_with":"k1"`) })
	// The keys file is read once more when its watch is in place, for a
	// rotation written in between: from then on the watch alone can see
	// one.
	waitFor(t, "the files read again once watched", func() bool {
		return strings.Count(p.logs.String(), `"msg":"config reloaded"`) >= 2
	})

	// Rotation step 1: the new key first, written as a Secret volume
	// writes, by a rename.
	next := keys + ".next"
	writeFile(t, next, key("k2")+key("k1"))
	if err := os.Rename(next, keys); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the rotated keys file reloaded", func() bool { return strings.Contains(p.logs.String(), `"seals_with":"k2"`) })
}

// A rejected reload is seen in the metrics, not only in the log, so an
// alert can say that the file in place is not the configuration in force;
// the next edit that applies clears it.
func TestRejectedReloadIsInTheMetricsUntilAnEditApplies(t *testing.T) {
	up, _ := countingUpstream(t)
	file := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, file, "routes:\n  - match: \"POST /v1/charges\"\n")
	p := start(t, nil, "--config", file, "--upstream", up.URL)
	want := func(what, successful, applied, rejected string) {
		t.Helper()
		for series, want := range map[string]string{
			`idempotency_proxy_config_last_reload_successful`:           successful,
			`idempotency_proxy_config_reloads_total{result="applied"}`:  applied,
			`idempotency_proxy_config_reloads_total{result="rejected"}`: rejected,
		} {
			if got := p.metric(t, series); got != want {
				t.Errorf("%s: %s = %q, want %s", what, series, got, want)
			}
		}
	}
	want("at start", "1", "0", "0")

	writeFile(t, file, "routes:\n  - match: \"POST /v1/charges\"\n    ttl: -1s\n")
	waitFor(t, "the rejected reload", func() bool { return strings.Contains(p.logs.String(), "config reload rejected") })
	want("after an invalid edit", "0", "0", "1")

	writeFile(t, file, "routes:\n  - match: \"POST /v1/charges\"\n    ttl: 1h\n")
	waitFor(t, "the reload", func() bool { return strings.Contains(p.logs.String(), `"msg":"config reloaded"`) })
	want("after a valid edit", "1", "1", "1")
}

// A config file that is a symlink to a file in another directory (a
// checkout, a shared configuration directory) reloads when that file is
// edited in place: the edit raises its event in the target's directory,
// not in the link's.
func TestEditOfASymlinkedConfigFilesTargetReloads(t *testing.T) {
	up, _ := countingUpstream(t)
	target := filepath.Join(t.TempDir(), "current.yaml")
	link := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, target, "routes:\n  - match: \"POST /v1/charges\"\n")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	p := start(t, nil, "--config", link, "--upstream", up.URL)

	writeFile(t, target, "routes:\n  - match: \"POST /v1/charges\"\n    require_key: true\n")
	waitFor(t, "the edit of the link's target reloaded", func() bool {
		return strings.Contains(p.logs.String(), `"msg":"config reloaded"`)
	})
	if res, _ := p.post(t, "/v1/charges", "", "{}"); res.StatusCode != http.StatusBadRequest {
		t.Errorf("after the reload, a charge without a key got %d, want 400 (require_key: true)", res.StatusCode)
	}
}

// A config file written in place through another path reloads: a file
// bind-mounted into a container (docker run -v ./config.yaml:/etc/…) is
// edited through the host's directory, whose events the container's
// directory never sees. A hard link in another directory is written the
// same way here, without a mount.
func TestConfigFileWrittenThroughAnotherPathReloads(t *testing.T) {
	up, _ := countingUpstream(t)
	file := filepath.Join(t.TempDir(), "config.yaml")
	host := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, file, "routes:\n  - match: \"POST /v1/charges\"\n")
	if err := os.Link(file, host); err != nil {
		t.Fatal(err)
	}
	p := start(t, nil, "--config", file, "--upstream", up.URL)

	writeFile(t, host, "routes:\n  - match: \"POST /v1/charges\"\n    require_key: true\n")
	waitFor(t, "the edit written through the other path reloaded", func() bool {
		return strings.Contains(p.logs.String(), `"msg":"config reloaded"`)
	})
	if res, _ := p.post(t, "/v1/charges", "", "{}"); res.StatusCode != http.StatusBadRequest {
		t.Errorf("after the reload, a charge without a key got %d, want 400 (require_key: true)", res.StatusCode)
	}
}
