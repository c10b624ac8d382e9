package testbin

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Version is stamped into the proxy binary built for tests, so tests can
// check what --version and build_info report.
const Version = "v0.0.0-test"

// Program is a main package of the module, built at most once per test
// binary, on first use.
type Program struct {
	Package string // import path relative to the module root, e.g. "./cmd/idempotency-proxy"
	LDFlags string // passed to go build -ldflags when not empty

	once sync.Once
	path string
	err  error
}

// The programs the tests run.
var (
	Proxy    = &Program{Package: "./cmd/idempotency-proxy", LDFlags: "-X main.version=" + Version}
	Upstream = &Program{Package: "./examples/upstream"}
)

// Path builds the program on its first call and returns the binary's path;
// a build failure fails tb (and every later caller).
func (p *Program) Path(tb testing.TB) string {
	tb.Helper()
	path, err := p.Build()
	if err != nil {
		tb.Fatal(err)
	}
	return path
}

// Build is Path for TestMain, where there is no test to fail: it builds the
// program on its first call and returns the binary's path or the build error.
func (p *Program) Build() (string, error) {
	p.once.Do(func() { p.path, p.err = p.build() })
	return p.path, p.err
}

func (p *Program) build() (string, error) {
	dir, err := buildDir()
	if err != nil {
		return "", err
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, filepath.Base(p.Package))
	args := []string{"build", "-o", bin}
	if p.LDFlags != "" {
		args = append(args, "-ldflags", p.LDFlags)
	}
	cmd := exec.Command("go", append(args, p.Package)...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", p.Package, err, stderr.Bytes())
	}
	return bin, nil
}

var (
	dirMu sync.Mutex
	dir   string // holds every binary built by this test binary
)

func buildDir() (string, error) {
	dirMu.Lock()
	defer dirMu.Unlock()
	if dir == "" {
		d, err := os.MkdirTemp("", "idempotency-proxy-testbin-")
		if err != nil {
			return "", fmt.Errorf("temp dir for test binaries: %w", err)
		}
		dir = d
	}
	return dir, nil
}

// Main runs the tests and then removes the binaries they built. Use it as
// TestMain: os.Exit(testbin.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	Cleanup()
	return code
}

// Cleanup removes the binaries built so far; Main calls it.
func Cleanup() {
	dirMu.Lock()
	defer dirMu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
		dir = ""
	}
}

// productModule is idempotency-proxy's module path; the benchmark's and the
// browser test's modules require it, replaced by the checkout around them.
const productModule = "github.com/idempotency-proxy/idempotency-proxy"

// ModuleRoot is the directory of idempotency-proxy's go.mod, the checkout's
// root, also for a test in a module of its own nested in it (bench/,
// e2e/browser/): the programs above are built there.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", productModule).Output()
	if err != nil {
		var msg []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			msg = ee.Stderr
		}
		return "", fmt.Errorf("go list -m %s: %w\n%s", productModule, err, msg)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("go list -m %s: no directory (not inside a checkout of it)", productModule)
	}
	return dir, nil
}
