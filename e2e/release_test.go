package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
)

// moduleRoot is the repository root, or the test fails.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestReleaseScriptBuildsStampedBinariesAndChecksums runs scripts/release.sh
// for one platform: the binary it builds reports the git-describe version,
// SHA256SUMS verifies it, and without a Docker engine the script prints the
// image's build command instead of failing.
func TestReleaseScriptBuildsStampedBinariesAndChecksums(t *testing.T) {
	root := moduleRoot(t)
	describe, err := exec.Command("git", "-C", root, "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		t.Skipf("no git checkout to describe: %v", err)
	}
	version := strings.TrimSpace(string(describe))
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "scripts", "release.sh"))
	cmd.Env = append(os.Environ(), "PLATFORMS=linux/amd64", "OUT="+out)
	log, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("release.sh: %v\n%s", err, log)
	}
	dir := filepath.Join(out, version)
	bin := filepath.Join(dir, "idempotency-proxy-"+version+"-linux-amd64")
	got, err := exec.Command(bin, "--version").Output()
	if err != nil || strings.TrimSpace(string(got)) != "idempotency-proxy "+version {
		t.Errorf("%s --version = %q, %v; want idempotency-proxy %s", bin, got, err, version)
	}
	check := exec.Command("sha256sum", "-c", "SHA256SUMS")
	check.Dir = dir
	if res, err := check.CombinedOutput(); err != nil || !strings.Contains(string(res), filepath.Base(bin)+": OK") {
		t.Errorf("sha256sum -c SHA256SUMS: %v\n%s", err, res)
	}
	if !strings.Contains(string(log), "docker build --build-arg VERSION="+version+" -t idempotency-proxy:"+version+" .") {
		t.Errorf("release.sh names no image build for %s:\n%s", version, log)
	}
}

// TestPythonClientInstallsWithNoDownload installs clients/python with pip
// told never to use an index: its build backend is in the package, of the
// standard library only, so a machine without PyPI installs it.
func TestPythonClientInstallsWithNoDownload(t *testing.T) {
	python := testbin.Tool(t, "python3", "Debian package python3")
	if err := exec.Command(python, "-m", "pip", "--version").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("python3 has no pip (required when CI is set; Debian package python3-pip): %v", err)
		}
		t.Skipf("python3 has no pip: %v", err)
	}
	target := t.TempDir()
	install := exec.Command(python, "-m", "pip", "install", "--no-index", "--no-cache-dir", "--target", target, "./clients/python")
	install.Dir = moduleRoot(t)
	install.Env = append(os.Environ(), "PIP_DISABLE_PIP_VERSION_CHECK=1")
	if res, err := install.CombinedOutput(); err != nil {
		t.Fatalf("pip install --no-index ./clients/python: %v\n%s", err, res)
	}
	show := exec.Command(python, "-c", "import importlib.metadata, idempotency_client; print(importlib.metadata.version('idempotency-proxy-client'), idempotency_client.Client.__name__)")
	show.Dir = t.TempDir() // not the checkout: the installed copy is imported
	show.Env = append(os.Environ(), "PYTHONPATH="+target)
	res, err := show.CombinedOutput()
	if err != nil || strings.TrimSpace(string(res)) != "0.1.0 Client" {
		t.Errorf("the installed client: %v\n%s\nwant version 0.1.0 and its Client", err, res)
	}
	pyproject, err := os.ReadFile(filepath.Join(moduleRoot(t), "clients", "python", "pyproject.toml"))
	if err != nil || !strings.Contains(string(pyproject), "\nversion = \"0.1.0\"\n") {
		t.Errorf("clients/python/pyproject.toml does not have the version the build backend writes (0.1.0): %v", err)
	}
}
