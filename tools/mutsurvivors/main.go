// Command mutsurvivors reads the results of the mutation tester
// (scripts/mutation.sh runs it, one JSON file per package), prints each
// package's mutation score, and fails when a mutant survived that
// docs/mutation-survivors.md does not list with the reason it may.
//
//	go run ./tools/mutsurvivors [-full] [-list docs/mutation-survivors.md] proxy=proxy.json store=store.json
//
// A surviving mutant is named by its file, its mutator and the source line
// it changes, not by line number, so that an entry of the list outlives
// edits elsewhere in the file. With -full (a sweep of whole packages) an
// entry of a swept package that no longer survives is reported too: the
// list only shrinks.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// results is the part of the tester's JSON output read here.
type results struct {
	Files []struct {
		Name      string `json:"file_name"`
		Mutations []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
			Line   int    `json:"line"`
			Column int    `json:"column"`
		} `json:"mutations"`
	} `json:"files"`
}

// survivor names a surviving mutant as the list does.
type survivor struct{ file, mutator, code string }

// tally is one package's count of mutants by status.
type tally map[string]int

func (t tally) score() string {
	caught := t["KILLED"] + t["TIMED OUT"]
	if caught+t["LIVED"] == 0 {
		return "no mutant run"
	}
	return fmt.Sprintf("%.1f%% (%d of %d caught)", 100*float64(caught)/float64(caught+t["LIVED"]), caught, caught+t["LIVED"])
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mutsurvivors", flag.ContinueOnError)
	fs.SetOutput(stderr)
	list := fs.String("list", "docs/mutation-survivors.md", "the list of survivors and their reasons")
	full := fs.Bool("full", false, "whole packages were swept: also report listed survivors that no longer survive")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "mutsurvivors: no results given (package=results.json ...)")
		return 2
	}
	listed, err := readList(*list)
	if err != nil {
		fmt.Fprintln(stderr, "mutsurvivors:", err)
		return 2
	}
	seen := map[survivor]bool{}
	swept := map[string]bool{}
	var unlisted []string
	for _, a := range fs.Args() {
		pkg, file, ok := strings.Cut(a, "=")
		if !ok {
			fmt.Fprintf(stderr, "mutsurvivors: %q is not package=results.json\n", a)
			return 2
		}
		swept[pkg] = true
		t, lived, err := readResults(pkg, file)
		if err != nil {
			fmt.Fprintln(stderr, "mutsurvivors:", err)
			return 2
		}
		fmt.Fprintf(stdout, "%-20s %s; %d not covered, %d not viable", pkg, t.score(), t["NOT COVERED"], t["NOT VIABLE"])
		if n := t["NOT RUN"]; n > 0 {
			fmt.Fprintf(stdout, ", %d not run (past the budget)", n)
		}
		fmt.Fprintln(stdout)
		for _, l := range lived {
			seen[l.survivor] = true
			if !listed[l.survivor] {
				unlisted = append(unlisted, fmt.Sprintf("%s:%d:%d %s `%s`", l.file, l.line, l.column, l.mutator, l.code))
			}
		}
	}
	bad := 0
	sort.Strings(unlisted)
	for _, u := range unlisted {
		fmt.Fprintln(stdout, "NEW SURVIVOR", u)
		bad++
	}
	if *full {
		for s := range listed {
			if swept[path.Dir(s.file)] && !seen[s] {
				fmt.Fprintf(stdout, "NO LONGER SURVIVES %s %s `%s`: remove it from %s\n", s.file, s.mutator, s.code, *list)
				bad++
			}
		}
	}
	if bad > 0 {
		fmt.Fprintf(stdout, "%d new survivors or stale entries: kill each with a test, or list it in %s with the reason it may survive\n", bad, *list)
		return 1
	}
	return 0
}

// lived is a surviving mutant where it was found.
type lived struct {
	survivor
	line, column int
}

// readResults tallies the results of package directory pkg and returns its
// survivors, each named by the source line it changes (read from the
// module's copy of the file, relative to the current directory).
func readResults(pkg, file string) (tally, []lived, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, err
	}
	var r results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", file, err)
	}
	t := tally{}
	var out []lived
	for _, f := range r.Files {
		name := path.Join(pkg, f.Name)
		var lines []string
		for _, m := range f.Mutations {
			t[m.Status]++
			if m.Status != "LIVED" {
				continue
			}
			if lines == nil {
				if lines, err = readLines(name); err != nil {
					return nil, nil, err
				}
			}
			if m.Line < 1 || m.Line > len(lines) {
				return nil, nil, fmt.Errorf("%s: a mutant at line %d, past the file's end: results of another version?", name, m.Line)
			}
			out = append(out, lived{survivor{name, m.Type, strings.TrimSpace(lines[m.Line-1])}, m.Line, m.Column})
		}
	}
	return t, out, nil
}

func readLines(name string) ([]string, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return strings.Split(string(b), "\n"), nil
}

// readList reads the survivors listed in the table rows of the list:
//
//	| `file` | `MUTATOR` | `source line` | reason |
//
// Every listed survivor needs a reason.
func readList(name string) (map[survivor]bool, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[survivor]bool{}
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 4 {
			return nil, fmt.Errorf("%s:%d: want | `file` | `MUTATOR` | `source line` | reason |", name, n)
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if cells[3] == "" {
			return nil, fmt.Errorf("%s:%d: a survivor without its reason", name, n)
		}
		s := survivor{unquote(cells[0]), unquote(cells[1]), unquote(cells[2])}
		if out[s] {
			return nil, fmt.Errorf("%s:%d: %s %s listed twice", name, n, s.file, s.mutator)
		}
		out[s] = true
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 && n == 0 {
		return nil, errors.New(name + ": empty")
	}
	return out, nil
}

// unquote takes the code marks off a cell, as Markdown writes them: a
// source line holding a backtick between two backticks and spaces, and a
// pipe as \|.
func unquote(s string) string {
	s = strings.ReplaceAll(s, `\|`, "|")
	if strings.HasPrefix(s, "`` ") && strings.HasSuffix(s, " ``") {
		return s[3 : len(s)-3]
	}
	return strings.TrimSuffix(strings.TrimPrefix(s, "`"), "`")
}
