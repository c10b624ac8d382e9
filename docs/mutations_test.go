package docs_test

import (
	"bufio"
	"os"
	"regexp"
	"strings"
	"testing"
)

// listedMutation is what the guarantees check needs of an entry of
// e2e/mutations.txt (tools/mutate reads the whole entry).
type listedMutation struct{ id, promise, test string }

func readMutations(t *testing.T) []listedMutation {
	t.Helper()
	f, err := os.Open("../e2e/mutations.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []listedMutation
	var cur listedMutation
	sc := bufio.NewScanner(f)
	flush := func() {
		if cur.id != "" {
			out = append(out, cur)
		}
		cur = listedMutation{}
	}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "promise: "):
			cur.promise = strings.TrimPrefix(line, "promise: ")
		case strings.HasPrefix(line, "test: "):
			_, cur.test, _ = strings.Cut(strings.TrimPrefix(line, "test: "), " ")
		}
	}
	flush()
	return out
}

// promises returns the rows of docs/guarantees.md's "What the proxy
// promises": each bold title (without its final period) and its paragraph.
func promises(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("guarantees.md")
	if err != nil {
		t.Fatal(err)
	}
	title := regexp.MustCompile(`(?s)^\*\*(.+?)\*\*`)
	out := map[string]string{}
	for i, section := range strings.Split(string(b), "\n## ") {
		heading, body, _ := strings.Cut(section, "\n")
		switch {
		case i == 0 || heading == "What a proxy cannot guarantee":
			continue
		case heading != "What the proxy promises":
			// A section of its own, such as "What survives what", is
			// one promise.
			out[promiseName(heading)] = strings.Join(strings.Fields(body), " ")
			continue
		}
		for _, para := range strings.Split(body, "\n\n") {
			para = strings.TrimSpace(para)
			if m := title.FindStringSubmatch(para); m != nil {
				out[promiseName(m[1])] = strings.Join(strings.Fields(para), " ")
			}
		}
	}
	if _, ok := out["One execution per key, across replicas"]; !ok {
		t.Fatal(`docs/guarantees.md: no "## What the proxy promises" section with its first promise`)
	}
	return out
}

// promiseName is a row's title as mutations name it: one line, without
// code marks or the final period.
func promiseName(s string) string {
	return strings.TrimSuffix(strings.ReplaceAll(strings.Join(strings.Fields(s), " "), "`", ""), ".")
}

// TestEveryPromiseHasAMutationItsTestCatches holds docs/guarantees.md and
// e2e/mutations.txt to each other: every promise has at least one listed
// mutation, every mutation attacks a promise of the page, and the row names
// each mutation and the test that must catch it. tools/mutate, run in
// CI, checks that the test does.
func TestEveryPromiseHasAMutationItsTestCatches(t *testing.T) {
	rows := promises(t)
	if len(rows) < 10 {
		t.Fatalf("found %d promises in docs/guarantees.md; the page's layout changed", len(rows))
	}
	covered := map[string]bool{}
	for _, m := range readMutations(t) {
		row, ok := rows[m.promise]
		if !ok {
			t.Errorf("mutation %s attacks %q, which is not a promise of docs/guarantees.md", m.id, m.promise)
			continue
		}
		covered[m.promise] = true
		if !strings.Contains(row, "`"+m.id+"`") {
			t.Errorf("promise %q does not name its mutation `%s`", m.promise, m.id)
		}
		if !strings.Contains(row, m.test) {
			t.Errorf("promise %q does not name %s, the test that catches mutation %s", m.promise, m.test, m.id)
		}
	}
	for name := range rows {
		if !covered[name] {
			t.Errorf("promise %q has no mutation in e2e/mutations.txt", name)
		}
	}
}
