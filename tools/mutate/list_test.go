package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseListReadsEntriesAndEscapes(t *testing.T) {
	got, err := parseList(strings.NewReader(`# a comment
id: fencing
promise: Fencing
file: store/redisstore/ops.go
find: if v == ARGV[2] then\n
replace: if v then\n
test: ./e2e TestLeaseLostIsFenced

id: second
file: a.go
find: x
test: ./proxy TestX
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d entries, want 2", len(got))
	}
	m := got[0]
	if m.ID != "fencing" || m.Find != "if v == ARGV[2] then\n" || m.Replace != "if v then\n" || m.Package != "./e2e" || m.Test != "TestLeaseLostIsFenced" {
		t.Errorf("first entry = %+v", m)
	}
	if got[1].Replace != "" {
		t.Errorf("second entry's replace = %q, want empty (a deletion)", got[1].Replace)
	}
}

func TestParseListRefusesIncompleteOrAmbiguousEntries(t *testing.T) {
	for name, list := range map[string]string{
		"no test":        "id: a\nfile: f\nfind: x\n",
		"no find":        "id: a\nfile: f\ntest: ./p TestA\n",
		"same id twice":  "id: a\nfile: f\nfind: x\ntest: ./p TestA\n\nid: a\nfile: f\nfind: y\ntest: ./p TestA\n",
		"find = replace": "id: a\nfile: f\nfind: x\nreplace: x\ntest: ./p TestA\n",
		"test pattern":   "id: a\nfile: f\nfind: x\ntest: ./p TestA|TestB\n",
		"unknown field":  "id: a\nfiel: f\n",
		"no colon":       "id a\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := parseList(strings.NewReader(list)); err == nil {
				t.Error("parseList accepted it")
			}
		})
	}
}

// TestEveryListedMutationStillApplies reads the repository's own list: a
// change to the product that moves or rewrites a line a mutation needs
// fails here, in the ordinary test run, rather than only in the slower
// mutation run.
func TestEveryListedMutationStillApplies(t *testing.T) {
	muts, err := load("../../e2e/mutations.txt", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range muts {
		b, err := os.ReadFile(filepath.Join("../..", filepath.FromSlash(m.File)))
		if err != nil {
			t.Errorf("%s: %v", m.ID, err)
			continue
		}
		if n := strings.Count(string(b), m.Find); n != 1 {
			t.Errorf("%s: %s holds the text to find %d times, want exactly once", m.ID, m.File, n)
		}
	}
}
