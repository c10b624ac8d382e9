package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// sweptModule writes a module, in a git repository, whose package has
// mutants of every kind a sweep tells apart: caught, living, on a line no
// test runs, and not compiling.
func sweptModule(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module tiny\n\ngo 1.26\n",
		"calc.go": "package tiny\n\n" +
			"func Add(a, b int) int { return a + b }\n\n" +
			"func Max(a, b int) int {\n\tif a > b {\n\t\treturn a\n\t}\n\treturn b\n}\n\n" +
			"func Sub(a, b int) int { return a - b }\n\n" +
			"func Join(a, b string) string { return a + b }\n",
		"calc_test.go": "package tiny\n\nimport \"testing\"\n\n" +
			"func TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal(\"Add(2, 3) != 5\")\n\t}\n}\n\n" +
			// Max's boundary is never probed: a >= b lives.
			"func TestMax(t *testing.T) {\n\tif Max(3, 1) != 3 || Max(1, 3) != 3 {\n\t\tt.Fatal(\"Max\")\n\t}\n}\n\n" +
			"func TestJoin(t *testing.T) {\n\tif Join(\"a\", \"b\") != \"ab\" {\n\t\tt.Fatal(\"Join\")\n\t}\n}\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git := exec.Command("git", "init", "-q")
	git.Dir = dir
	if out, err := git.CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	return dir
}

func TestSweepRunsOnlyTheTestsThatRunAMutantsLine(t *testing.T) {
	dir := sweptModule(t)
	report := filepath.Join(t.TempDir(), "report.json")
	var out strings.Builder
	if code := sweep(sweepConfig{root: dir, pkg: "", out: report, coefficient: 5}, &out, os.Stderr); code != 0 {
		t.Fatalf("sweep exited %d:\n%s", code, out.String())
	}
	got := readReport(t, report)
	want := map[string]string{
		"calc.go:3 ARITHMETIC_BASE":       statusKilled,
		"calc.go:6 CONDITIONALS_BOUNDARY": statusLived,
		"calc.go:6 CONDITIONALS_NEGATION": statusKilled,
		"calc.go:12 ARITHMETIC_BASE":      statusNotCovered,
		"calc.go:12 INVERT_NEGATIVES":     statusNotCovered,
		"calc.go:14 ARITHMETIC_BASE":      statusNotViable, // string - string
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %q, want %q", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("mutants %v, want %v", got, want)
	}
	// Each mutant ran with the tests that run its line, and no others.
	for _, line := range []string{"calc.go:3:35 ARITHMETIC_BASE (1 tests", "calc.go:6:7 CONDITIONALS_BOUNDARY (1 tests"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("the sweep's output does not say %q:\n%s", line, out.String())
		}
	}
	after, err := os.ReadFile(filepath.Join(dir, "calc.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(after), "return a + b") || !strings.Contains(string(after), "if a > b") {
		t.Errorf("the module's own calc.go changed:\n%s", after)
	}
}

func TestDryRunListsEveryMutantWithTheTestsThatRunItOrNone(t *testing.T) {
	dir := sweptModule(t)
	var out strings.Builder
	if code := sweep(sweepConfig{root: dir, pkg: "", out: filepath.Join(t.TempDir(), "report.json"), dryRun: true}, &out, os.Stderr); code != 0 {
		t.Fatalf("sweep -n exited %d:\n%s", code, out.String())
	}
	for _, line := range []string{
		"calc.go:3:35 ARITHMETIC_BASE + → -: TestAdd\n",
		"calc.go:6:7 CONDITIONALS_BOUNDARY > → >=: TestMax\n",
		"calc.go:12:35 ARITHMETIC_BASE - → +: NOT COVERED\n",
		"calc.go:12:35 INVERT_NEGATIVES - → +: NOT COVERED\n",
	} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("sweep -n does not say %q:\n%s", line, out.String())
		}
	}
}

func TestSweepLeavesOutATestThatFailsUnmutated(t *testing.T) {
	dir := sweptModule(t)
	// TestAdd now fails whatever the mutant: it must not be counted as
	// catching Add's.
	body, err := os.ReadFile(filepath.Join(dir, "calc_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	body = []byte(strings.Replace(string(body), "Add(2, 3) != 5", "Add(2, 3) != 6", 1))
	if err := os.WriteFile(filepath.Join(dir, "calc_test.go"), body, 0o644); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(t.TempDir(), "report.json")
	var out strings.Builder
	if code := sweep(sweepConfig{root: dir, pkg: "", out: report, coefficient: 5, only: map[string]bool{"calc.go": true}}, &out, io.Discard); code != 0 {
		t.Fatalf("sweep exited %d:\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "TestAdd fails unmutated and is left out") {
		t.Errorf("the sweep does not say TestAdd is left out:\n%s", out.String())
	}
	if got := readReport(t, report)["calc.go:3 ARITHMETIC_BASE"]; got != statusNotCovered {
		t.Errorf("Add's mutant is %q, want %q: no passing test runs its line", got, statusNotCovered)
	}
}

func TestSweepRunsACaseExpressionWithTheTestsOfItsSwitch(t *testing.T) {
	dir := sweptModule(t)
	// A coverage profile counts no block around "case n < 0:", only the
	// switch's header before it and the clause's body after it.
	sign := "package tiny\n\n" +
		"func Sign(n int) string {\n\tswitch {\n\tcase n < 0:\n\t\treturn \"-\"\n\tcase n > 0:\n\t\treturn \"+\"\n\t}\n\treturn \"0\"\n}\n"
	signTest := "package tiny\n\nimport \"testing\"\n\n" +
		// Zero is never tried: n <= 0 and n >= 0 live, the negations die.
		"func TestSign(t *testing.T) {\n\tif Sign(-2) != \"-\" || Sign(2) != \"+\" {\n\t\tt.Fatal(\"Sign\")\n\t}\n}\n"
	for name, body := range map[string]string{"sign.go": sign, "sign_test.go": signTest} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	report := filepath.Join(t.TempDir(), "report.json")
	var out strings.Builder
	if code := sweep(sweepConfig{root: dir, pkg: "", out: report, coefficient: 5, only: map[string]bool{"sign.go": true}}, &out, io.Discard); code != 0 {
		t.Fatalf("sweep exited %d:\n%s", code, out.String())
	}
	got := readReport(t, report)
	want := map[string]string{
		"sign.go:5 CONDITIONALS_BOUNDARY": statusLived,
		"sign.go:5 CONDITIONALS_NEGATION": statusKilled,
		"sign.go:7 CONDITIONALS_BOUNDARY": statusLived,
		"sign.go:7 CONDITIONALS_NEGATION": statusKilled,
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %q, want %q", k, got[k], w)
		}
	}
	if !strings.Contains(out.String(), "sign.go:5:9 CONDITIONALS_NEGATION (1 tests") {
		t.Errorf("the case expression's mutant did not run with TestSign:\n%s", out.String())
	}
}

func TestSweepRunsASelectsCaseAndADeclarationWithTheirTests(t *testing.T) {
	dir := sweptModule(t)
	// "case c <- n + 1:" lies in no counted block, as a switch's case
	// does; "2 * 3" in no function, so in no block at all.
	offer := "package tiny\n\n" +
		"const Step = 2 * 3\n\n" +
		"func Offer(c chan int, n int) bool {\n\tselect {\n\tcase c <- n + 1:\n\t\treturn true\n\tdefault:\n\t\treturn false\n\t}\n}\n"
	offerTest := "package tiny\n\nimport \"testing\"\n\n" +
		"func TestOffer(t *testing.T) {\n\tc := make(chan int, 1)\n\tif !Offer(c, 1) || <-c != 2 {\n\t\tt.Fatal(\"Offer\")\n\t}\n}\n\n" +
		"func TestStep(t *testing.T) {\n\tif Step != 6 {\n\t\tt.Fatal(\"Step\")\n\t}\n}\n"
	for name, body := range map[string]string{"offer.go": offer, "offer_test.go": offerTest} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	report := filepath.Join(t.TempDir(), "report.json")
	var out strings.Builder
	if code := sweep(sweepConfig{root: dir, pkg: "", out: report, coefficient: 5, only: map[string]bool{"offer.go": true}}, &out, io.Discard); code != 0 {
		t.Fatalf("sweep exited %d:\n%s", code, out.String())
	}
	got := readReport(t, report)
	want := map[string]string{
		"offer.go:3 ARITHMETIC_BASE": statusKilled,
		"offer.go:7 ARITHMETIC_BASE": statusKilled,
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %q, want %q", k, got[k], w)
		}
	}
	// The select's case runs with the test that runs the select; the
	// declaration with every test of the package, the five of them.
	for _, line := range []string{"offer.go:7:14 ARITHMETIC_BASE (1 tests", "offer.go:3:16 ARITHMETIC_BASE (5 tests"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("the sweep's output does not say %q:\n%s", line, out.String())
		}
	}
}

func TestChangedLinesAreTheNewSideOfEachHunk(t *testing.T) {
	dir := sweptModule(t)
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "a.go"), []byte("package sub\n\nvar A = 1\nvar B = 2\nvar C = 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run("add", ".")
	run("commit", "-qm", "one")
	if err := os.WriteFile(filepath.Join(dir, "sub", "a.go"), []byte("package sub\n\nvar A = 1\nvar B = 20\nvar C = 3\nvar D = 4\nvar E = 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run("commit", "-qam", "two")
	got, err := changedLines(dir, "sub", "HEAD~1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]bool{4: true, 6: true, 7: true}
	if len(got) != 1 || len(got["a.go"]) != len(want) {
		t.Fatalf("changed lines %v, want a.go %v", got, want)
	}
	for l := range want {
		if !got["a.go"][l] {
			t.Errorf("line %d of a.go is not among the changed %v", l, got["a.go"])
		}
	}
}

// readReport reads a sweep's report as "file:line MUTATOR" → status.
func readReport(t *testing.T, name string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Files []struct {
			Name      string `json:"file_name"`
			Mutations []struct {
				Type   string `json:"type"`
				Status string `json:"status"`
				Line   int    `json:"line"`
			} `json:"mutations"`
		} `json:"files"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range r.Files {
		for _, m := range f.Mutations {
			got[fmt.Sprintf("%s:%d %s", f.Name, m.Line, m.Type)] = m.Status
		}
	}
	return got
}
