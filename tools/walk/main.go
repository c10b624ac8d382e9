// Command walk measures how long a request's walk through the code is:
// following the code a request runs, in order, a stay is a maximal stretch
// spent in one source file, and a return a stay in a file the walk was in
// before (docs/architecture.md, "How long the walk is").
//
//	go run ./tools/walk        # stays, files and returns per request
//	go run ./tools/walk -v     # and the walk, a line per stay
//
// It copies the packages walkrun is built from to a temporary directory,
// puts a probe (walkprobe) at the start of every function of the proxy's,
// the stores' and the internal packages there (instrument.go), builds
// walkrun against that copy and runs it: a keyed POST on the memory store
// (a miss), the same again (a replay) and one without a key. walkrun runs
// on one processor (GOMAXPROCS=1), so that the goroutines a request starts
// take turns as they hand over to each other, the same way every run.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

const (
	runner = "tools/walk/walkrun"
	probes = "tools/walk/walkprobe"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("walk", flag.ContinueOnError)
	fs.SetOutput(stderr)
	verbose := fs.Bool("v", false, "print each request's walk, a line per stay")
	keep := fs.Bool("keep", false, "keep the instrumented copy, and print where it is")
	only := fs.String("only", "", "count only the files under these folders, separated by commas (proxy): the others are passed through, as the standard library is")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	walks, err := measure(*keep, strings.FieldsFunc(*only, func(r rune) bool { return r == ',' }), stderr)
	if err != nil {
		fmt.Fprintln(stderr, "walk:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%-8s %6s %6s %8s\n", "request", "stays", "files", "returns")
	for _, r := range walks {
		fmt.Fprintf(stdout, "%-8s %6d %6d %8d\n", r.name, len(r.walk.stays), r.walk.files, r.walk.returnCount())
	}
	if *verbose {
		for _, r := range walks {
			fmt.Fprintf(stdout, "\n%s (%d):\n", r.name, r.status)
			for i, s := range r.walk.stays {
				again := ""
				if r.walk.returns[i] {
					again = "  (return)"
				}
				fmt.Fprintf(stdout, "%4d  g%-4d %s:%s%s\n", i+1, s.goroutine, s.file, s.fn, again)
			}
		}
	}
	return 0
}

// A request is one request walkrun served, and its walk.
type request struct {
	name   string
	status int
	walk   walk
}

// measure instruments a copy of the module, runs walkrun against it and
// counts its requests' walks, in the files under the folders only (all
// instrumented files when empty).
func measure(keep bool, only []string, stderr io.Writer) ([]request, error) {
	root, err := goOutput("", "env", "GOMOD")
	if err != nil {
		return nil, err
	}
	root = filepath.Dir(root)
	module, err := goOutput(root, "list", "-m")
	if err != nil {
		return nil, err
	}
	pkgs, err := goOutput(root, "list", "-deps", "-f", "{{if and .Module .Module.Main}}{{.ImportPath}}{{end}}", "./"+runner)
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "walk-")
	if err != nil {
		return nil, err
	}
	if keep {
		fmt.Fprintln(stderr, "walk: the instrumented copy is in", work)
	} else {
		defer os.RemoveAll(work)
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		if err := copyFile(filepath.Join(root, f), filepath.Join(work, f), nil); err != nil {
			return nil, err
		}
	}
	instrumented := map[string]bool{} // files, relative to the root
	for _, pkg := range strings.Fields(pkgs) {
		dir := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		if err := copyPackage(root, work, dir, module+"/"+probes, instrumented); err != nil {
			return nil, err
		}
	}
	counted := instrumented
	if len(only) > 0 {
		counted = map[string]bool{}
		for file := range instrumented {
			for _, dir := range only {
				if strings.HasPrefix(file, strings.Trim(dir, "./")+"/") {
					counted[file] = true
				}
			}
		}
	}
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(work, "walkrun"), "./"+runner)
	build.Dir, build.Env, build.Stderr = work, append(os.Environ(), "GOWORK=off"), stderr
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("build the instrumented walkrun: %w", err)
	}
	cmd := exec.Command(filepath.Join(work, "walkrun"))
	cmd.Env, cmd.Stderr = append(os.Environ(), "GOMAXPROCS=1"), stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("walkrun: %w", err)
	}
	return parse(out, module, counted)
}

// instrumentedDir reports whether the functions of the package in dir are
// on the walk: the proxy's, the stores' and the internal ones, not what
// only tests link.
func instrumentedDir(dir string) bool {
	under := func(p string) bool { return dir == p || strings.HasPrefix(dir, p+"/") }
	return (under("proxy") || under("store") || under("internal")) && !under("internal/testkit")
}

// copyPackage copies the files of the package in dir, tests left out,
// instrumenting its Go files when it is on the walk.
func copyPackage(root, work, dir, probePath string, instrumented map[string]bool) error {
	entries, err := os.ReadDir(filepath.Join(root, dir))
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || strings.HasSuffix(name, "_test.go") {
			continue
		}
		rel := path.Join(dir, name)
		var edit func([]byte) ([]byte, error)
		if instrumentedDir(dir) && strings.HasSuffix(name, ".go") {
			edit = func(src []byte) ([]byte, error) { return instrument(rel, src, probePath) }
			instrumented[rel] = true
		}
		if err := copyFile(filepath.Join(root, rel), filepath.Join(work, rel), edit); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
	}
	return nil
}

func copyFile(src, dst string, edit func([]byte) ([]byte, error)) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if edit != nil {
		if b, err = edit(b); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

// parse reads walkrun's output: a "request" line per request, then its
// events. An exit names the function returned to as the runtime does
// (module/dir/file.go, module/dir.(*T).f); a file not counted is outside
// the walk.
func parse(out []byte, module string, counted map[string]bool) ([]request, error) {
	var reqs []request
	var steps []step
	done := func() {
		if len(reqs) > 0 {
			reqs[len(reqs)-1].walk = count(steps)
		}
		steps = nil
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		switch {
		case len(f) == 3 && f[0] == "request":
			done()
			status, _ := strconv.Atoi(f[2])
			reqs = append(reqs, request{name: f[1], status: status})
		case len(f) == 4 && (f[0] == "enter" || f[0] == "exit") && len(reqs) > 0:
			g, _ := strconv.ParseInt(f[1], 10, 64)
			file, fn := f[2], f[3]
			if f[0] == "exit" {
				file, fn = strings.TrimPrefix(file, module+"/"), shortName(fn)
			}
			if !counted[file] {
				file = ""
			}
			steps = append(steps, step{goroutine: g, file: file, fn: fn})
		default:
			return nil, fmt.Errorf("walkrun printed %q", sc.Text())
		}
	}
	done()
	if len(reqs) == 0 {
		return nil, fmt.Errorf("walkrun served no request")
	}
	return reqs, nil
}

var typeArgs = regexp.MustCompile(`\[[^\]]*\]`)

// shortName is a function's name as the runtime gives it, without its
// package and type arguments, as funcName names it: "(*Handler).ServeHTTP",
// "(*Callers).serve".
func shortName(fn string) string {
	fn = typeArgs.ReplaceAllString(fn, "")
	fn = fn[strings.LastIndex(fn, "/")+1:]
	return fn[strings.Index(fn, ".")+1:]
}

func goOutput(dir string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
