package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A sweep makes every mutant of one package that the mutation tester
// gremlins makes by default (the same operators, the same names), and
// runs against each only the tests that run its line: each test of the
// package is run once alone with a coverage profile first, so a mutant
// costs one build and the few tests that can see it, not the package's
// whole suite. Its report is in gremlins' JSON form, which
// tools/mutsurvivors reads.
type sweepConfig struct {
	root        string          // the module's root; the one around the current directory when empty
	pkg         string          // package directory, relative to the module root
	out         string          // the JSON report
	only        map[string]bool // file names to sweep; all when empty
	since       string          // when set, only the lines changed since this commit
	coefficient float64         // a mutant's run may take this many times its tests' unmutated run
	budget      time.Duration   // start no mutant after this long; 0 is no bound
	dryRun      bool            // list the mutants and their tests, run none
}

// The mutators gremlins enables by default, and what each makes of an
// operator.
var mutators = []struct {
	name string
	ops  map[token.Token]token.Token
}{
	{"ARITHMETIC_BASE", map[token.Token]token.Token{token.ADD: token.SUB, token.MUL: token.QUO, token.QUO: token.MUL, token.REM: token.MUL, token.SUB: token.ADD}},
	{"CONDITIONALS_BOUNDARY", map[token.Token]token.Token{token.GEQ: token.GTR, token.GTR: token.GEQ, token.LEQ: token.LSS, token.LSS: token.LEQ}},
	{"CONDITIONALS_NEGATION", map[token.Token]token.Token{token.EQL: token.NEQ, token.GEQ: token.LSS, token.GTR: token.LEQ, token.LEQ: token.GTR, token.LSS: token.GEQ, token.NEQ: token.EQL}},
	{"INCREMENT_DECREMENT", map[token.Token]token.Token{token.DEC: token.INC, token.INC: token.DEC}},
	{"INVERT_NEGATIVES", map[token.Token]token.Token{token.SUB: token.ADD}},
}

// The statuses of a mutant, as gremlins spells them.
const (
	statusKilled     = "KILLED"
	statusLived      = "LIVED"
	statusTimedOut   = "TIMED OUT"
	statusNotCovered = "NOT COVERED"
	statusNotViable  = "NOT VIABLE"
	statusLeft       = "NOT RUN" // past the budget
)

type mutant struct {
	file         string // name within the package directory
	offset       int    // of the operator in the file
	line, column int
	// runAt is the place of the file a test that evaluates the operator
	// runs, as the coverage profile counts it: the operator's own, or, for
	// a case expression, which lies in no counted block, the switch's or
	// the select's.
	runAt token.Position
	// declared: the operator is in a declaration outside every function,
	// which a profile never counts: the package's constants are computed
	// as it compiles and its variables set as it starts, before any test
	// runs, so every test of the package runs it.
	declared bool
	mutator  string
	from, to token.Token
	tests    []string // the tests that run its line, fastest first
	status   string
	took     time.Duration
}

// block is a run of statements a coverage profile counts.
type block struct {
	file                     string
	line0, col0, line1, col1 int
}

func (b block) holds(file string, line, col int) bool {
	if b.file != file {
		return false
	}
	if line < b.line0 || line > b.line1 {
		return false
	}
	if line == b.line0 && col < b.col0 {
		return false
	}
	return line != b.line1 || col <= b.col1
}

func sweep(c sweepConfig, stdout, stderr io.Writer) int {
	start := time.Now()
	root, err := c.root, error(nil)
	if root == "" {
		root, err = moduleRoot()
	}
	if err != nil {
		fmt.Fprintln(stderr, "mutate:", err)
		return 2
	}
	work, err := os.MkdirTemp("", "mutate-sweep-")
	if err != nil {
		fmt.Fprintln(stderr, "mutate:", err)
		return 1
	}
	defer os.RemoveAll(work)
	// Stopped, it leaves no copy of the module behind.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-stop
		os.RemoveAll(work)
		os.Exit(1)
	}()
	mod := filepath.Join(work, "module")
	if err := copyModule(root, mod); err != nil {
		fmt.Fprintln(stderr, "mutate: copy the module:", err)
		return 1
	}
	s := sweeper{c: c, mod: mod, dir: filepath.Join(mod, filepath.FromSlash(c.pkg)), work: work, out: stdout}
	var changed map[string]map[int]bool
	if c.since != "" {
		if changed, err = changedLines(root, c.pkg, c.since); err != nil {
			fmt.Fprintln(stderr, "mutate:", err)
			return 2
		}
	}
	muts, err := s.mutants(changed)
	if err != nil {
		fmt.Fprintln(stderr, "mutate:", err)
		return 1
	}
	if len(muts) == 0 {
		fmt.Fprintf(stdout, "sweep %s: no mutant\n", c.pkg)
		return writeReport(c.out, c.pkg, nil, stderr)
	}
	if c.budget > 0 {
		s.deadline = start.Add(c.budget)
	}
	if err := s.coverage(); errors.Is(err, errPastBudget) {
		// Without every test's lines, a mutant's tests are not known.
		for i := range muts {
			muts[i].status = statusLeft
		}
		fmt.Fprintf(stdout, "sweep %s: its tests were not all mapped within %s: %d mutants not run\n", c.pkg, c.budget, len(muts))
		return writeReport(c.out, c.pkg, muts, stderr)
	} else if err != nil {
		fmt.Fprintln(stderr, "mutate:", err)
		return 1
	}
	runnable := 0
	for i := range muts {
		m := &muts[i]
		if m.declared {
			m.tests = s.every()
		} else {
			m.tests = s.covering(m.file, m.runAt.Line, m.runAt.Column)
		}
		if len(m.tests) == 0 {
			m.status = statusNotCovered
		} else {
			runnable++
		}
	}
	fmt.Fprintf(stdout, "sweep %s: %d mutants, %d on lines a test runs; %d tests, %s to map them\n",
		c.pkg, len(muts), runnable, len(s.took), time.Since(start).Round(time.Second))
	for i := range muts {
		m := &muts[i]
		if c.dryRun {
			tests := strings.Join(m.tests, " ")
			if m.status == statusNotCovered {
				tests = statusNotCovered
			}
			fmt.Fprintf(stdout, "%s:%d:%d %s %s → %s: %s\n", m.file, m.line, m.column, m.mutator, m.from, m.to, tests)
			continue
		}
		if m.status != "" {
			continue
		}
		if c.budget > 0 && time.Since(start) > c.budget {
			m.status = statusLeft
			continue
		}
		s.try(m)
		fmt.Fprintf(stdout, "%-11s %s:%d:%d %s (%d tests, %s)\n", m.status, path.Join(c.pkg, m.file), m.line, m.column, m.mutator, len(m.tests), m.took.Round(100*time.Millisecond))
	}
	if c.dryRun {
		return 0
	}
	left := 0
	for _, m := range muts {
		if m.status == statusLeft {
			left++
		}
	}
	if left > 0 {
		fmt.Fprintf(stdout, "sweep %s: %d mutants not run, past the budget of %s\n", c.pkg, left, c.budget)
	}
	fmt.Fprintf(stdout, "sweep %s: done in %s\n", c.pkg, time.Since(start).Round(time.Second))
	return writeReport(c.out, c.pkg, muts, stderr)
}

type sweeper struct {
	c        sweepConfig
	mod      string // the module's copy
	dir      string // the package's directory in it
	work     string
	out      io.Writer
	deadline time.Time                // the budget's end, if any
	build    time.Duration            // building the package's tests, unmutated
	took     map[string]time.Duration // each test's run alone
	cover    map[string][]block       // the blocks each test runs
}

// mutants makes the package's mutants, in file and position order: on the
// lines in changed only, when it is not nil.
func (s *sweeper) mutants(changed map[string]map[int]bool) ([]mutant, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var out []mutant
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		if len(s.c.only) > 0 && !s.c.only[name] {
			continue
		}
		if changed != nil && changed[name] == nil {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, filepath.Join(s.dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		cases, funcs := caseExprs(f), funcBodies(f)
		ast.Inspect(f, func(n ast.Node) bool {
			tok, pos, ok := operator(n)
			if !ok {
				return true
			}
			p := fset.Position(pos)
			if changed != nil && !changed[name][p.Line] {
				return true
			}
			runAt := p
			if sw, ok := cases.switchOf(pos); ok {
				runAt = fset.Position(sw)
			}
			declared := !funcs.hold(pos)
			for _, mu := range mutators {
				if to, ok := mu.ops[tok]; ok {
					out = append(out, mutant{file: name, offset: p.Offset, line: p.Line, column: p.Column, runAt: runAt, declared: declared, mutator: mu.name, from: tok, to: to})
				}
			}
			return true
		})
	}
	return out, nil
}

// caseSpans are the case expressions of a file's switch and select
// statements, each with the statement that evaluates it. A coverage
// profile counts a switch's header, or the select keyword, in the block
// before its opening brace and each clause's body as a block of its own;
// the expressions after `case` lie in neither, so a mutant there would
// seem to be run by no test. Every test that runs the statement's header
// may evaluate them (a tagless switch tries its cases in order until one
// holds; a select evaluates every channel and value it sends as it
// starts), so those are its tests.
type caseSpans []struct{ from, to, sw token.Pos }

func caseExprs(f *ast.File) caseSpans {
	var out caseSpans
	add := func(sw token.Pos, body *ast.BlockStmt) {
		for _, st := range body.List {
			if cc, ok := st.(*ast.CaseClause); ok && len(cc.List) > 0 {
				out = append(out, struct{ from, to, sw token.Pos }{cc.Case, cc.Colon, sw})
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SwitchStmt:
			add(n.Switch, n.Body)
		case *ast.TypeSwitchStmt:
			add(n.Switch, n.Body)
		case *ast.SelectStmt:
			for _, st := range n.Body.List {
				if cc, ok := st.(*ast.CommClause); ok && cc.Comm != nil {
					out = append(out, struct{ from, to, sw token.Pos }{cc.Case, cc.Colon, n.Select})
				}
			}
		}
		return true
	})
	return out
}

// spans are the bodies of a file's functions and function literals,
// where every operator lies in a block a coverage profile counts.
type spans [][2]token.Pos

func funcBodies(f *ast.File) spans {
	var out spans
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			if n.Body != nil {
				out = append(out, [2]token.Pos{n.Body.Lbrace, n.Body.Rbrace})
			}
		case *ast.FuncLit:
			out = append(out, [2]token.Pos{n.Body.Lbrace, n.Body.Rbrace})
		}
		return true
	})
	return out
}

func (s spans) hold(pos token.Pos) bool {
	for _, b := range s {
		if b[0] < pos && pos < b[1] {
			return true
		}
	}
	return false
}

// switchOf returns the switch whose case expression holds pos.
func (c caseSpans) switchOf(pos token.Pos) (token.Pos, bool) {
	for _, s := range c {
		if s.from <= pos && pos < s.to {
			return s.sw, true
		}
	}
	return token.NoPos, false
}

// operator is the operator of a node gremlins mutates, and where it is.
func operator(n ast.Node) (token.Token, token.Pos, bool) {
	switch n := n.(type) {
	case *ast.AssignStmt:
		return n.Tok, n.TokPos, true
	case *ast.BinaryExpr:
		return n.Op, n.OpPos, true
	case *ast.BranchStmt:
		return n.Tok, n.TokPos, true
	case *ast.IncDecStmt:
		return n.Tok, n.TokPos, true
	case *ast.UnaryExpr:
		return n.Op, n.OpPos, true
	}
	return 0, 0, false
}

// coverage runs each test of the package alone, once, with a coverage
// profile of the package, and keeps which blocks it ran and how long it
// took. A test that fails unmutated is left out: it would catch anything.
func (s *sweeper) coverage() error {
	imp, err := s.goOutput("list", "./"+s.c.pkg)
	if err != nil {
		return err
	}
	start := time.Now()
	if _, err := s.goOutput("test", "-count=1", "-vet=off", "-run", "^$", "./"+s.c.pkg); err != nil {
		return fmt.Errorf("the tests of %s do not build: %v", s.c.pkg, err)
	}
	s.build = time.Since(start)
	listed, err := s.goOutput("test", "-list", ".", "./"+s.c.pkg)
	if err != nil {
		return err
	}
	var tests []string
	for _, l := range strings.Split(listed, "\n") {
		if testName.MatchString(l) {
			tests = append(tests, l)
		}
	}
	bin := filepath.Join(s.work, "cover.test")
	if _, err := s.goOutput("test", "-c", "-o", bin, "-covermode=set", "-coverpkg="+strings.TrimSpace(imp), "./"+s.c.pkg); err != nil {
		return err
	}
	s.took = map[string]time.Duration{}
	s.cover = map[string][]block{}
	prefix := strings.TrimSpace(imp) + "/"
	for i, t := range tests {
		if !s.deadline.IsZero() && time.Now().After(s.deadline) {
			return errPastBudget
		}
		profile := filepath.Join(s.work, "cover-"+strconv.Itoa(i)+".out")
		start := time.Now()
		cmd := exec.Command(bin, "-test.count=1", "-test.timeout=10m", "-test.run", "^"+regexp.QuoteMeta(t)+"$", "-test.coverprofile", profile)
		cmd.Dir = s.dir
		out, err := runGroup(cmd, 11*time.Minute)
		took := time.Since(start)
		if err != nil {
			fmt.Fprintf(s.out, "sweep %s: %s fails unmutated and is left out:\n%s\n", s.c.pkg, t, failuresThenTail(out))
			continue
		}
		blocks, err := readProfile(profile, prefix)
		if err != nil {
			return fmt.Errorf("%s: %w", t, err)
		}
		s.took[t] = took
		s.cover[t] = blocks
	}
	return nil
}

var errPastBudget = errors.New("past the budget")

// testName is a line of go test -list naming a test, a fuzz test's seed
// corpus or an example: what go test runs without -bench.
var testName = regexp.MustCompile(`^(Test|Fuzz|Example)\w*$`)

// covering lists the tests that run the given position, fastest first.
func (s *sweeper) covering(file string, line, col int) []string {
	var out []string
	for t, blocks := range s.cover {
		for _, b := range blocks {
			if b.holds(file, line, col) {
				out = append(out, t)
				break
			}
		}
	}
	s.fastestFirst(out)
	return out
}

// every lists every test of the package that passes unmutated, fastest
// first: the tests of a mutant in a declaration.
func (s *sweeper) every() []string {
	out := make([]string, 0, len(s.took))
	for t := range s.took {
		out = append(out, t)
	}
	s.fastestFirst(out)
	return out
}

func (s *sweeper) fastestFirst(tests []string) {
	sort.Slice(tests, func(i, j int) bool {
		if s.took[tests[i]] != s.took[tests[j]] {
			return s.took[tests[i]] < s.took[tests[j]]
		}
		return tests[i] < tests[j]
	})
}

// try applies m to its file, runs its tests, and restores the file.
func (s *sweeper) try(m *mutant) {
	start := time.Now()
	defer func() { m.took = time.Since(start) }()
	name := filepath.Join(s.dir, m.file)
	orig, err := os.ReadFile(name)
	if err != nil {
		m.status = statusNotViable
		return
	}
	from, to := m.from.String(), m.to.String()
	if string(orig[m.offset:m.offset+len(from)]) != from {
		m.status = statusNotViable
		return
	}
	mutated := append(append(append([]byte{}, orig[:m.offset]...), to...), orig[m.offset+len(from):]...)
	if err := os.WriteFile(name, mutated, 0o644); err != nil {
		m.status = statusNotViable
		return
	}
	defer os.WriteFile(name, orig, 0o644)
	var alone time.Duration
	quoted := make([]string, len(m.tests))
	for i, t := range m.tests {
		alone += s.took[t]
		quoted[i] = regexp.QuoteMeta(t)
	}
	// The bound: the coefficient times the unmutated build and tests,
	// and never under ten seconds, as a loaded machine's pauses are.
	bound := time.Duration(s.c.coefficient * float64(s.build+alone))
	if bound < 10*time.Second {
		bound = 10 * time.Second
	}
	cmd := exec.Command("go", "test", "-count=1", "-vet=off", "-failfast", "-timeout", (bound + 5*time.Second).String(),
		"-run", "^("+strings.Join(quoted, "|")+")$", "./"+s.c.pkg)
	cmd.Dir = s.mod
	out, err := runGroup(cmd, bound)
	var exit *exec.ExitError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		m.status = statusTimedOut
	case err == nil:
		m.status = statusLived
	case strings.Contains(out, "[build failed]") || strings.Contains(out, "[setup failed]"):
		m.status = statusNotViable
	case errors.As(err, &exit):
		m.status = statusKilled
	default:
		m.status = statusNotViable
	}
}

// runGroup runs cmd in a process group of its own, and on timeout kills
// the group, the servers a test started with it: none is left behind.
func runGroup(cmd *exec.Cmd, timeout time.Duration) (string, error) {
	var buf strings.Builder
	cmd.Stdout, cmd.Stderr = &buf, &buf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return buf.String(), err
	case <-time.After(timeout):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return buf.String(), context.DeadlineExceeded
	}
}

func (s *sweeper) goOutput(args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = s.mod
	out, err := runGroup(cmd, 30*time.Minute)
	if err != nil {
		return out, fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, indent(out))
	}
	return out, nil
}

// readProfile reads the blocks a coverage profile counts as run, of the
// files of the package whose import path ends in prefix.
func readProfile(name, prefix string) ([]block, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []block
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "mode:") {
			continue
		}
		// import/path/file.go:l0.c0,l1.c1 statements count
		fields := strings.Fields(line)
		if len(fields) != 3 || fields[2] == "0" || !strings.HasPrefix(fields[0], prefix) {
			continue
		}
		file, span, ok := strings.Cut(fields[0][len(prefix):], ":")
		if !ok || strings.Contains(file, "/") {
			continue
		}
		var b block
		if _, err := fmt.Sscanf(span, "%d.%d,%d.%d", &b.line0, &b.col0, &b.line1, &b.col1); err != nil {
			return nil, fmt.Errorf("%s: %q: %v", name, line, err)
		}
		b.file = file
		out = append(out, b)
	}
	return out, sc.Err()
}

// changedLines reads, from git diff, the lines of pkg's own files changed
// since commit.
func changedLines(root, pkg, since string) (map[string]map[int]bool, error) {
	cmd := exec.Command("git", "diff", "-U0", "--no-color", since, "HEAD", "--", pkg+"/*.go")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git diff %s: %w", since, err)
	}
	changed := map[string]map[int]bool{}
	var file string
	for _, l := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(l, "+++ "):
			file = ""
			if p := strings.TrimPrefix(l, "+++ b/"); p != l && path.Dir(p) == pkg {
				file = path.Base(p)
			}
		case strings.HasPrefix(l, "@@ ") && file != "":
			// @@ -a,b +c,d @@
			fields := strings.Fields(l)
			if len(fields) < 3 {
				continue
			}
			start, count, _ := strings.Cut(strings.TrimPrefix(fields[2], "+"), ",")
			first, err := strconv.Atoi(start)
			if err != nil {
				return nil, fmt.Errorf("git diff: %q", l)
			}
			n := 1
			if count != "" {
				if n, err = strconv.Atoi(count); err != nil {
					return nil, fmt.Errorf("git diff: %q", l)
				}
			}
			if changed[file] == nil {
				changed[file] = map[int]bool{}
			}
			for i := first; i < first+n; i++ {
				changed[file][i] = true
			}
		}
	}
	return changed, nil
}

// writeReport writes the mutants in gremlins' JSON form.
func writeReport(name, pkg string, muts []mutant, stderr io.Writer) int {
	type mutation struct {
		Type   string `json:"type"`
		Status string `json:"status"`
		Line   int    `json:"line"`
		Column int    `json:"column"`
	}
	type file struct {
		Name      string     `json:"file_name"`
		Mutations []mutation `json:"mutations"`
	}
	var r struct {
		Files []file `json:"files"`
	}
	r.Files = []file{}
	for _, m := range muts {
		if len(r.Files) == 0 || r.Files[len(r.Files)-1].Name != m.file {
			r.Files = append(r.Files, file{Name: m.file})
		}
		f := &r.Files[len(r.Files)-1]
		f.Mutations = append(f.Mutations, mutation{m.mutator, m.status, m.line, m.column})
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err == nil {
		err = os.WriteFile(name, b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(stderr, "mutate:", err)
		return 1
	}
	return 0
}
