package main

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// A mutation is one small change to the product that a named test must
// catch: the test has to fail once find is replaced by replace in file.
type mutation struct {
	ID      string // short, unique name used by -run and in reports
	Promise string // the docs/guarantees.md promise it attacks
	File    string // path relative to the module root
	Find    string // must occur exactly once in File
	Replace string
	Package string // the test's package, e.g. ./e2e
	Test    string // the test that must fail (a top-level test name)
	line    int    // where the entry starts in the list, for messages
}

// parseList reads the mutation list: entries of "field: value" lines,
// separated by blank lines; lines starting with # are comments. A value may
// hold \n and \t escapes, so a find or replace may span lines. Every field
// but promise is required.
func parseList(r io.Reader) ([]mutation, error) {
	var (
		out  []mutation
		cur  *mutation
		seen = map[string]int{}
		n    int
	)
	flush := func() error {
		if cur == nil {
			return nil
		}
		m := *cur
		cur = nil
		for field, v := range map[string]string{"id": m.ID, "file": m.File, "find": m.Find, "test": m.Test} {
			if v == "" {
				return fmt.Errorf("line %d: entry has no %s", m.line, field)
			}
		}
		if m.Find == m.Replace {
			return fmt.Errorf("line %d: %s: find and replace are the same", m.line, m.ID)
		}
		if prev, ok := seen[m.ID]; ok {
			return fmt.Errorf("line %d: id %q already used on line %d", m.line, m.ID, prev)
		}
		seen[m.ID] = m.line
		out = append(out, m)
		return nil
	}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		n++
		line := strings.TrimRight(sc.Text(), " \t")
		switch {
		case strings.HasPrefix(strings.TrimSpace(line), "#"):
			continue
		case strings.TrimSpace(line) == "":
			if err := flush(); err != nil {
				return nil, err
			}
			continue
		}
		field, value, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("line %d: want \"field: value\", got %q", n, line)
		}
		if cur == nil {
			cur = &mutation{line: n}
		}
		value = unescape(strings.TrimPrefix(value, " "))
		switch strings.TrimSpace(field) {
		case "id":
			cur.ID = value
		case "promise":
			cur.Promise = value
		case "file":
			cur.File = value
		case "find":
			cur.Find = value
		case "replace":
			cur.Replace = value
		case "test":
			pkg, name, ok := strings.Cut(value, " ")
			if !ok || !strings.HasPrefix(pkg, "./") || strings.ContainsAny(name, " |^$") {
				return nil, fmt.Errorf("line %d: test wants \"./package TestName\", got %q", n, value)
			}
			cur.Package, cur.Test = pkg, name
		default:
			return nil, fmt.Errorf("line %d: unknown field %q (want id, promise, file, find, replace, test)", n, field)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

func unescape(s string) string {
	return strings.NewReplacer(`\n`, "\n", `\t`, "\t", `\\`, `\`).Replace(s)
}
