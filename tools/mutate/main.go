// Command mutate checks that the tests named in docs/guarantees.md can fail:
// it applies each mutation of a list (a line of the product changed) to a
// copy of the module, runs only the test that must catch it, and reports
// every mutation that survives. It exits 1 when one survives, does not
// compile, or when a named test fails before any mutation.
//
//	go run ./tools/mutate                 # every mutation in e2e/mutations.txt
//	go run ./tools/mutate -run fencing    # those whose id matches
//
// With -sweep it is a mutation tester instead: it makes every operator
// mutant of one package and runs against each the tests that run its line
// (sweep.go; scripts/mutation.sh runs it).
//
//	go run ./tools/mutate -sweep store/memory -o memory.json
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mutate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	list := fs.String("list", "e2e/mutations.txt", "the mutation list, relative to the module root")
	only := fs.String("run", "", "run only the mutations whose id matches this regular expression")
	timeout := fs.Duration("timeout", 5*time.Minute, "bound on one test run")
	verbose := fs.Bool("v", false, "print the output of every test run")
	sweepPkg := fs.String("sweep", "", "sweep this package directory with every operator mutant instead of running the list")
	report := fs.String("o", "mutants.json", "-sweep: the report, in gremlins' JSON form")
	files := fs.String("files", "", "-sweep: only these files of the package, separated by spaces")
	since := fs.String("since", "", "-sweep: only the lines changed since this commit")
	coefficient := fs.Float64("timeout-coefficient", 5, "-sweep: a mutant's run may take this many times its build and tests unmutated")
	budget := fs.Duration("budget", 0, "-sweep: start no mutant after this long (0: no bound)")
	dryRun := fs.Bool("n", false, "-sweep: list the mutants and the tests that run them, run none")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *sweepPkg != "" {
		c := sweepConfig{pkg: strings.Trim(filepath.ToSlash(*sweepPkg), "./"), out: *report, since: *since,
			coefficient: *coefficient, budget: *budget, dryRun: *dryRun, only: map[string]bool{}}
		for _, f := range strings.Fields(*files) {
			c.only[f] = true
		}
		return sweep(c, stdout, stderr)
	}
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(stderr, "mutate:", err)
		return 2
	}
	muts, err := load(filepath.Join(root, *list), *only)
	if err != nil {
		fmt.Fprintln(stderr, "mutate:", err)
		return 2
	}
	work, err := os.MkdirTemp("", "mutate-")
	if err != nil {
		fmt.Fprintln(stderr, "mutate:", err)
		return 1
	}
	defer os.RemoveAll(work)
	if err := copyModule(root, work); err != nil {
		fmt.Fprintln(stderr, "mutate: copy the module:", err)
		return 1
	}
	r := runner{dir: work, timeout: *timeout, verbose: *verbose, out: stdout}
	start := time.Now()
	if err := r.baseline(muts); err != nil {
		fmt.Fprintln(stderr, "mutate:", err)
		return 1
	}
	bad := 0
	for _, m := range muts {
		v := r.try(m)
		fmt.Fprintf(stdout, "%-9s %-40s %s %s (%s)\n", v.word, m.ID, m.Package, m.Test, v.took.Round(time.Second))
		if v.word != killed {
			bad++
			fmt.Fprintf(stdout, "          %s:%d %s\n%s\n", *list, m.line, v.why, indent(v.output))
		}
	}
	fmt.Fprintf(stdout, "%d mutations, %d caught, %d not, in %s\n", len(muts), len(muts)-bad, bad, time.Since(start).Round(time.Second))
	if bad > 0 {
		return 1
	}
	return 0
}

func load(path, only string) ([]mutation, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	muts, err := parseList(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if only == "" {
		return muts, nil
	}
	re, err := regexp.Compile(only)
	if err != nil {
		return nil, fmt.Errorf("-run: %w", err)
	}
	var kept []mutation
	for _, m := range muts {
		if re.MatchString(m.ID) {
			kept = append(kept, m)
		}
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("no mutation id matches %q", only)
	}
	return kept, nil
}

const (
	killed   = "caught"
	survived = "SURVIVED"
	broken   = "BROKEN"
)

type verdict struct {
	word   string
	why    string
	output string
	took   time.Duration
}

type runner struct {
	dir     string
	timeout time.Duration
	verbose bool
	out     io.Writer
}

// baseline runs every named test unmutated, one go test per package: a
// test that already fails would "catch" any mutation.
func (r runner) baseline(muts []mutation) error {
	byPkg := map[string][]string{}
	for _, m := range muts {
		byPkg[m.Package] = append(byPkg[m.Package], regexp.QuoteMeta(m.Test))
	}
	pkgs := make([]string, 0, len(byPkg))
	for p := range byPkg {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, p := range pkgs {
		start := time.Now()
		// One run holds every named test of the package: each has the
		// bound of one test run, not all of them together.
		tests := dedupe(byPkg[p])
		out, err := r.goTestWithin(p, "^("+strings.Join(tests, "|")+")$", r.timeout*time.Duration(len(tests)))
		if err != nil {
			return fmt.Errorf("the named tests of %s fail without any mutation: %v\n%s", p, err, failuresThenTail(out))
		}
		fmt.Fprintf(r.out, "baseline  %s passes (%s)\n", p, time.Since(start).Round(time.Second))
	}
	return nil
}

// try applies m, runs its test and restores the file whatever happens.
func (r runner) try(m mutation) verdict {
	start := time.Now()
	path := filepath.Join(r.dir, filepath.FromSlash(m.File))
	orig, err := os.ReadFile(path)
	if err != nil {
		return verdict{word: broken, why: err.Error()}
	}
	if n := strings.Count(string(orig), m.Find); n != 1 {
		return verdict{word: broken, why: fmt.Sprintf("%s holds the text to find %d times, want exactly once: the list is out of date", m.File, n)}
	}
	info, err := os.Stat(path)
	if err != nil {
		return verdict{word: broken, why: err.Error()}
	}
	mutated := strings.Replace(string(orig), m.Find, m.Replace, 1)
	if err := os.WriteFile(path, []byte(mutated), info.Mode()); err != nil {
		return verdict{word: broken, why: err.Error()}
	}
	defer os.WriteFile(path, orig, info.Mode())
	out, err := r.goTest(m.Package, "^"+regexp.QuoteMeta(m.Test)+"$")
	v := verdict{output: out, took: time.Since(start)}
	if r.verbose {
		fmt.Fprintln(r.out, indent(out))
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		v.word, v.why = survived, m.Test+" passed with the mutation applied"
	case strings.Contains(out, "[build failed]") || strings.Contains(out, "[setup failed]"):
		v.word, v.why = broken, "the mutated module does not compile"
	case errors.As(err, &exit):
		v.word = killed
	default:
		v.word, v.why = broken, "go test did not run: "+err.Error()
	}
	if v.word == killed {
		v.output = ""
	}
	return v
}

func (r runner) goTest(pkg, pattern string) (string, error) {
	return r.goTestWithin(pkg, pattern, r.timeout)
}

// goTestWithin runs go test on pkg's tests matching pattern, bounded by
// timeout.
func (r runner) goTestWithin(pkg, pattern string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-failfast", "-timeout", timeout.String(), "-run", pattern, pkg)
	cmd.Dir = r.dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func dedupe(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// failures picks out of go test's output the lines that say which test
// failed and why — "--- FAIL" and the messages written from test files —
// which the tail indent keeps is often past, behind the logs a failing
// test dumps (a server's, say).
func failures(out string) string {
	var b strings.Builder
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "--- FAIL") || testMessage.MatchString(line) {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// failuresThenTail is out's tail, after its failures when the tail leaves
// some of out out.
func failuresThenTail(out string) string {
	if f := failures(out); f != "" && strings.Count(strings.TrimRight(out, "\n"), "\n") >= tailLines {
		return indent(f) + "\n" + indent(out)
	}
	return indent(out)
}

// testMessage is a t.Error or t.Log line written from a test file.
var testMessage = regexp.MustCompile(`^\s+[\w.-]+_test\.go:\d+: `)

// tailLines is how many lines of a test's output indent keeps: the last.
const tailLines = 40

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	lines := strings.Split(s, "\n")
	if len(lines) > tailLines {
		lines = append([]string{"…"}, lines[len(lines)-tailLines:]...)
	}
	return "          | " + strings.Join(lines, "\n          | ")
}
