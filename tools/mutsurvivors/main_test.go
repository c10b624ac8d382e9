package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// inModule writes a package p with one source file and a results file in
// a temporary module root, and runs the tests from there.
func inModule(t *testing.T, results, list string) (code int, out string) {
	t.Helper()
	dir := t.TempDir()
	write := func(name, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("p/a.go", "package p\n\nfunc f(n int) bool {\n\treturn n > 0 || n == -1\n}\n")
	write("p.json", results)
	write("list.md", list)
	t.Chdir(dir)
	var stdout, stderr bytes.Buffer
	code = run([]string{"-full", "-list", "list.md", "p=p.json"}, &stdout, &stderr)
	return code, stdout.String() + stderr.String()
}

const oneLived = `{"files":[{"file_name":"a.go","mutations":[
{"type":"CONDITIONALS_BOUNDARY","status":"LIVED","line":4,"column":11},
{"type":"CONDITIONALS_NEGATION","status":"KILLED","line":4,"column":11},
{"type":"CONDITIONALS_NEGATION","status":"TIMED OUT","line":4,"column":20}]}]}`

func TestUnlistedSurvivorFails(t *testing.T) {
	code, out := inModule(t, oneLived, "# Survivors\n")
	if code != 1 || !strings.Contains(out, "NEW SURVIVOR p/a.go:4:11 CONDITIONALS_BOUNDARY `return n > 0 || n == -1`") {
		t.Fatalf("exit %d, output:\n%s\nwant the survivor named by file, mutator and line, and exit 1", code, out)
	}
	if !strings.Contains(out, "66.7% (2 of 3 caught)") {
		t.Errorf("output:\n%s\nwant the score counting timeouts as caught", out)
	}
}

func TestListedSurvivorPasses(t *testing.T) {
	list := "| `p/a.go` | `CONDITIONALS_BOUNDARY` | `return n > 0 \\|\\| n == -1` | n is never 0 here |\n"
	if code, out := inModule(t, oneLived, list); code != 0 {
		t.Fatalf("exit %d, output:\n%s\nwant 0: the survivor is listed", code, out)
	}
}

func TestListedSurvivorThatDiedIsReported(t *testing.T) {
	list := "| `p/a.go` | `CONDITIONALS_BOUNDARY` | `return n > 0 \\|\\| n == -1` | n is never 0 here |\n" +
		"| `p/a.go` | `CONDITIONALS_NEGATION` | `return n > 0 \\|\\| n == -1` | gone |\n"
	code, out := inModule(t, oneLived, list)
	if code != 1 || !strings.Contains(out, "NO LONGER SURVIVES p/a.go CONDITIONALS_NEGATION") {
		t.Fatalf("exit %d, output:\n%s\nwant the stale entry reported, and exit 1", code, out)
	}
}

func TestSurvivorWithoutReasonIsRefused(t *testing.T) {
	list := "| `p/a.go` | `CONDITIONALS_BOUNDARY` | `return n > 0 \\|\\| n == -1` |  |\n"
	if code, out := inModule(t, oneLived, list); code != 2 || !strings.Contains(out, "list.md:1: a survivor without its reason") {
		t.Fatalf("exit %d, output:\n%s\nwant the row refused, exit 2", code, out)
	}
}
