package docs_test

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The product's go.mod holds what the binary, the client and their tests
// link; what only the load benchmark or the browser tests link lives in
// their modules (bench/, e2e/browser/), and go.work joins them for local
// work without changing what the product builds with.

// outsideWorkspace are the modules go.work leaves out, each with why.
var outsideWorkspace = map[string]string{}

// requirements reads the modules a go.mod requires, each with whether it
// is marked indirect.
func requirements(t *testing.T, gomod string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(gomod)
	if err != nil {
		t.Fatal(err)
	}
	req := map[string]bool{}
	inBlock := false
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		switch {
		case line == "require (":
			inBlock = true
			continue
		case inBlock && line == ")":
			inBlock = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !inBlock:
			continue
		}
		if f := strings.Fields(line); len(f) >= 2 && !strings.HasPrefix(f[0], "//") {
			req[f[0]] = strings.Contains(line, "// indirect")
		}
	}
	return req
}

// goList runs go list in the product's module and returns its lines.
func goList(t *testing.T, env []string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return strings.Fields(string(out))
}

// A module the benchmark or the browser tests require directly stays out of
// the product's go.mod unless a package of the product (tests included)
// links it: Fiber, fasthttp and chromedp never reach a consumer of the Go
// client or a scanner of the product.
func TestProductModuleRequiresNoBenchmarkOrBrowserModule(t *testing.T) {
	product := requirements(t, filepath.Join(repoRoot, "go.mod"))
	linked := map[string]bool{}
	for _, m := range goList(t, []string{"GOWORK=off"}, "-deps", "-test", "-f", "{{with .Module}}{{.Path}}{{end}}", "./...") {
		linked[m] = true
	}
	for _, nested := range []string{"bench", "e2e/browser"} {
		for mod, indirect := range requirements(t, filepath.Join(repoRoot, nested, "go.mod")) {
			if indirect || strings.HasPrefix(mod, "github.com/idempotency-proxy/idempotency-proxy") {
				continue
			}
			if _, ok := product[mod]; ok && !linked[mod] {
				t.Errorf("go.mod requires %s, which only %s links: run go mod tidy", mod, nested)
			}
		}
	}
	for mod := range product {
		for _, banned := range []string{"github.com/gofiber/", "github.com/valyala/fasthttp", "github.com/chromedp/"} {
			if strings.HasPrefix(mod, banned) {
				t.Errorf("go.mod requires %s, a module of the benchmark's or the browser tests'", mod)
			}
		}
	}
}

// go.work lists every module of the checkout but those outsideWorkspace
// names, and the product builds in it with the versions its own go.mod
// selects.
func TestWorkspaceBuildsTheProductAsItsModuleDoes(t *testing.T) {
	var modules []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.Name() == "go.mod" {
			rel, err := filepath.Rel(repoRoot, filepath.Dir(path))
			if err != nil {
				return err
			}
			modules = append(modules, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	work, err := os.ReadFile(filepath.Join(repoRoot, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	var used []string
	for line := range strings.Lines(string(work)) {
		line = strings.TrimSpace(line)
		if line == "." || strings.HasPrefix(line, "./") {
			used = append(used, strings.TrimPrefix(strings.TrimPrefix(line, "./"), "."))
		}
	}
	for _, m := range modules {
		name := m
		if m == "." {
			name = ""
		}
		_, out := outsideWorkspace[m]
		if in := slices.Contains(used, name); in == out {
			t.Errorf("module %q: in go.work %v, want %v (%s)", m, in, !out, outsideWorkspace[m])
		}
	}

	versions := func(env ...string) []string {
		return goList(t, env, "-deps", "-f", "{{with .Module}}{{.Path}}@{{.Version}}{{end}}", "./...")
	}
	alone, workspace := versions("GOWORK=off"), versions()
	slices.Sort(alone)
	alone = slices.Compact(alone)
	slices.Sort(workspace)
	workspace = slices.Compact(workspace)
	if !slices.Equal(alone, workspace) {
		t.Errorf("the product's dependencies differ in the workspace:\nalone:     %v\nworkspace: %v", alone, workspace)
	}
}
