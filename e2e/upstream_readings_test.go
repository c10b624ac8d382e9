package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// pathSpellings are spellings of the paths of POST /v1/charges and
// POST /v1/charges/{id}/capture that upstreams read in different ways.
var pathSpellings = []string{
	"/v1/charges", "/v1/charges/", "/v1/charges//", "/v1/charges/?x=1", "/v1/charges.json",
	"/v1/Charges", "/v1/CHARGES/", "/v1/%63harges", "/v1/%63harges/", "/v1/charges%20", "/v1/charges%20/",
	"/v1/charges%09", "/v1/charges%3B", "/v1/charges%3Bx=1", "/v1/charges;x=1", "/v1/charges%2F",
	"/v1/charges/./", "/v1/charges/ch_1/capture", "/v1/charges/ch_1/capture/", "/v1/charges/ch_1/capture.json",
	"/v1/charges/ch_1/Capture/", "/v1/chargesx", "/v1/other",
}

// TestEverySpellingAnUpstreamRoutesToAProtectedHandlerGetsItsPolicy
// starts a real Express upstream (its default routing: a trailing slash
// and any case reach the same handler) and a real Python one (wsgiref,
// its percent-decoded PATH_INFO routed exactly), asks each which handler
// every spelling of the protected paths reaches, and sends the same
// spellings without a key through the built binary in front of it: every
// spelling the upstream routes to a protected handler is refused (400
// missing-key, or ambiguous-path where another upstream may read it
// another way), never executed without a key. The routes are configured
// as docs/request-handling.md says for such upstreams (path_case:
// insensitive, for Express; trailing_slash: same, the default).
func TestEverySpellingAnUpstreamRoutesToAProtectedHandlerGetsItsPolicy(t *testing.T) {
	for _, up := range []struct {
		name  string
		start func(t *testing.T) string
		// reaches is a spelling this upstream routes to a protected
		// handler although it is not the pattern's path: without it the
		// test would compare nothing.
		reaches string
	}{
		{"express", startExpress, "/v1/charges/"},
		{"python", startPythonRouter, "/v1/%63harges"},
	} {
		t.Run(up.name, func(t *testing.T) {
			addr := up.start(t)
			route := map[string]string{"require_key": "true", "path_case": "insensitive"}
			p := startProxy(t, "readings-"+up.name, proxyConfig{
				Upstream: "http://" + addr,
				Memory:   true,
				Routes: []routeConfig{
					{Match: "POST /v1/charges", Keys: route},
					{Match: "POST /v1/charges/{id}/capture", Keys: route},
				},
			})
			proxyAddr := strings.TrimPrefix(p.URL(), "http://")
			protected := 0
			for _, target := range pathSpellings {
				handler := handlerFor(t, exchange(t, addr, targetRequest("POST", target, "")))
				got := exchange(t, proxyAddr, targetRequest("POST", target, ""))
				t.Logf("%-32s %s: %-8s proxy: %d %s", target, up.name, handler, got.Status, got.Problem())
				if handler == "none" {
					if target == up.reaches {
						t.Errorf("%s no longer routes %s to a protected handler: the test compares less than it says", up.name, target)
					}
					continue
				}
				protected++
				if got.Status != http.StatusBadRequest || got.Problem() != "missing-key" && got.Problem() != "ambiguous-path" {
					t.Errorf("%s routes %s to its %s handler; through the proxy without a key: %d %s, want 400 missing-key or ambiguous-path",
						up.name, target, handler, got.Status, got.Body)
				}
			}
			if protected < 3 {
				t.Errorf("%s routed %d spellings to a protected handler: the test compares too little", up.name, protected)
			}
		})
	}
}

// handlerFor is the handler an upstream of testdata/ says took a request.
func handlerFor(t *testing.T, r reply) string {
	t.Helper()
	var v struct {
		Handler string `json:"handler"`
	}
	if err := json.Unmarshal([]byte(r.Body), &v); err != nil || v.Handler == "" {
		t.Fatalf("upstream answered %d %q, not its handler", r.Status, r.Body)
	}
	return v.Handler
}

// startExpress runs testdata/express/server.js on a free loopback port
// until the test ends and returns its address. Express comes from the npm
// registry, pinned by testdata/express/package-lock.json, installed once
// per lock file into the user's cache directory.
func startExpress(t *testing.T) string {
	node := testbin.Tool(t, "node", "")
	modules := nodeModules(t, "express")
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	addr := testbin.FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	testbin.Start(t, testbin.Command{
		Path: node,
		Args: []string{filepath.Join(root, "e2e/testdata/express/server.js"), port},
		Env:  []string{"NODE_PATH=" + modules},
	})
	awaitListening(t, addr)
	return addr
}

// startPythonRouter runs testdata/python_router.py on a free loopback
// port until the test ends and returns its address.
func startPythonRouter(t *testing.T) string {
	python := testbin.Tool(t, "python3", "")
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	addr := testbin.FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	testbin.Start(t, testbin.Command{Path: python, Args: []string{filepath.Join(root, "e2e/testdata/python_router.py"), port}})
	awaitListening(t, addr)
	return addr
}

func awaitListening(t *testing.T, addr string) {
	t.Helper()
	wait.SucceedsSoon(t, 30*time.Second, func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
}

// nodeModules returns a node_modules directory holding the packages of
// testdata/NAME/package-lock.json, running npm ci into the user's cache
// directory the first time. Concurrent test binaries install into
// directories of their own and rename the first one finished into place.
func nodeModules(t *testing.T, name string) string {
	t.Helper()
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(root, "e2e/testdata", name)
	lock, err := os.ReadFile(filepath.Join(src, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	sum := sha256.Sum256(lock)
	dir := filepath.Join(cache, "idempotency-proxy-e2e", name+"-"+hex.EncodeToString(sum[:6]))
	// npm ci writes the hidden lockfile last.
	installed := filepath.Join(dir, "node_modules", ".package-lock.json")
	if _, err := os.Stat(installed); err == nil {
		return filepath.Join(dir, "node_modules")
	}
	npm := testbin.Tool(t, "npm", "the Debian package npm")
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	for _, name := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err == nil {
			err = os.WriteFile(filepath.Join(tmp, name), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", tmp, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil && !errors.Is(err, os.ErrExist) {
		if _, statErr := os.Stat(installed); statErr != nil {
			t.Fatalf("install %s's packages into %s: %v", name, dir, err)
		}
	}
	return filepath.Join(dir, "node_modules")
}
