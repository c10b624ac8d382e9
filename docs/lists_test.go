package docs_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/config"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/contract"
	"github.com/idempotency-proxy/idempotency-proxy/proxy"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// The lists a reader trusts — the store kinds, the key sources, the problem
// types — are held to the code that defines them: adding one without the
// lists that name it fails here.

const modulePath = "github.com/idempotency-proxy/idempotency-proxy/"

// storeKind is a store kind config.Store registers (one field each): its
// word in store.kind and its package, relative to the repository root.
type storeKind struct{ word, pkg string }

func storeKinds(t *testing.T) []storeKind {
	t.Helper()
	options := reflect.TypeFor[store.Options]()
	var out []storeKind
	st := reflect.TypeFor[config.Store]()
	for i := range st.NumField() {
		f := st.Field(i)
		if !f.Type.Implements(options) {
			continue
		}
		pkg, ok := strings.CutPrefix(f.Type.PkgPath(), modulePath)
		if !ok {
			t.Fatalf("store kind %s is outside the module: %s", f.Name, f.Type.PkgPath())
		}
		word, _, _ := strings.Cut(f.Tag.Get("config"), ",")
		out = append(out, storeKind{word: word, pkg: pkg})
	}
	if len(out) < 4 {
		t.Fatalf("found %d store kinds in config.Store (%v), want every kind", len(out), out)
	}
	return out
}

// section returns the text of doc under heading ("## Error responses"), up
// to the next heading of its level.
func section(t *testing.T, doc, heading string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("no section %q", heading)
	}
	level, _, _ := strings.Cut(heading, " ")
	rest, _, _ = strings.Cut(rest, "\n"+level+" ")
	return rest
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Every store kind registered in config.Store is in docs/architecture.md's
// map and in its "Every store passes one conformance suite" sentence, is
// named by store/storetest's package doc, has a test that runs that suite
// on it, and has its word in docs/configuration.md's store.kind row and its
// row in docs/guarantees.md's "What survives what".
func TestEveryStoreKindIsListedAndPassesTheConformanceSuite(t *testing.T) {
	arch := readDoc(t, "docs/architecture.md")
	// The map is the first indented block.
	mapStart := strings.Index(arch, "\n    ")
	drawing := arch[mapStart:]
	drawing = drawing[:strings.Index(drawing, "\n\n")]
	passes := arch[strings.Index(arch, "Every store passes one conformance suite"):]
	passes = passes[:strings.Index(passes, "\n\n")]
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(repoRoot, "store", "storetest", "storetest.go"), nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	suiteDoc := f.Doc.Text()
	runRE := regexp.MustCompile(`\bstoretest\.Run\(`)
	kindRow := section(t, readDoc(t, "docs/configuration.md"), "## Keys")
	if i := strings.Index(kindRow, "\n| `store.kind` |"); i >= 0 {
		kindRow, _, _ = strings.Cut(kindRow[i+1:], "\n")
	} else {
		t.Fatal("docs/configuration.md has no row for store.kind")
	}
	survives := section(t, readDoc(t, "docs/guarantees.md"), "## What survives what")
	for _, k := range storeKinds(t) {
		pkg := k.pkg
		if !strings.Contains(kindRow, "`"+k.word+"`") {
			t.Errorf("docs/configuration.md's store.kind row does not name `%s`:\n%s", k.word, kindRow)
		}
		if !strings.Contains(survives, "\n| `"+k.word+"` |") {
			t.Errorf("docs/guarantees.md \"What survives what\" has no row for `%s`", k.word)
		}
		if !regexp.MustCompile(`(?m)^    ` + regexp.QuoteMeta(pkg) + `/ `).MatchString(drawing) {
			t.Errorf("docs/architecture.md's map has no line for %s/", pkg)
		}
		if !strings.Contains(passes, "`"+pkg+"`") {
			t.Errorf("docs/architecture.md's \"Every store passes one conformance suite\" does not name `%s`:\n%s", pkg, passes)
		}
		if !strings.Contains(suiteDoc, pkg) {
			t.Errorf("store/storetest's package doc does not name %s:\n%s", pkg, suiteDoc)
		}
		tests, err := filepath.Glob(filepath.Join(repoRoot, pkg, "*_test.go"))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(tests, func(path string) bool {
			b, err := os.ReadFile(path)
			return err == nil && runRE.Match(b)
		}) {
			t.Errorf("no test of %s runs storetest.Run", pkg)
		}
	}
}

// formRE reads a key source's form as the configuration writes it:
// "header:NAME", "json:/pointer", "body_sha256".
var formRE = regexp.MustCompile(`^[a-z0-9_]+(?::[A-Za-z/]+)?$`)

// The table "Where the key comes from" in docs/request-handling.md has one
// row for every form of key source the configuration accepts, and every
// form it shows parses.
func TestEveryKeySourceIsInTheRequestHandlingTable(t *testing.T) {
	// A source of no kind is refused with the list of every form.
	var k proxy.KeySource
	err := k.UnmarshalText([]byte("nosuch:X"))
	if err == nil {
		t.Fatal("a key source of no kind was accepted")
	}
	_, want, ok := strings.Cut(err.Error(), "want ")
	if !ok {
		t.Fatalf("the error for an unknown kind lists no forms: %v", err)
	}
	var code []string
	for _, f := range strings.FieldsFunc(strings.ReplaceAll(want, " or ", ","), func(r rune) bool { return r == ',' }) {
		if f = strings.TrimSpace(f); !formRE.MatchString(f) {
			t.Fatalf("the error for an unknown kind lists %q, not a form: %v", f, err)
		}
		code = append(code, f)
	}
	table := section(t, readDoc(t, "docs/request-handling.md"), "## Where the key comes from")
	rowRE := regexp.MustCompile("(?m)^\\| `([^`]+)` \\|")
	var documented []string
	for _, m := range rowRE.FindAllStringSubmatch(table, -1) {
		documented = append(documented, m[1])
		example := strings.NewReplacer("NAME", "X", "/pointer", "/id").Replace(m[1])
		if err := k.UnmarshalText([]byte(example)); err != nil {
			t.Errorf("the documented key source %s (as %s) does not parse: %v", m[1], example, err)
		}
	}
	slices.Sort(code)
	slices.Sort(documented)
	if !slices.Equal(code, documented) {
		t.Errorf("docs/request-handling.md \"Where the key comes from\" lists %q, the configuration accepts %q", documented, code)
	}
}

// The table "Error responses" in docs/request-handling.md has one row for
// every problem type the proxy listener answers (clients/contract.json,
// which the proxy's tests hold the code to), with its status.
func TestErrorResponsesTableIsEveryProxyProblem(t *testing.T) {
	c, err := contract.Load(".")
	if err != nil {
		t.Fatal(err)
	}
	table := section(t, readDoc(t, "docs/request-handling.md"), "## Error responses")
	rowRE := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(c.ProblemBase) + "([a-z-]+)` \\| (\\d+) \\|")
	rows := map[string]int{}
	for _, m := range rowRE.FindAllStringSubmatch(table, -1) {
		status, _ := strconv.Atoi(m[2])
		rows[m[1]] = status
	}
	for _, p := range c.Problems {
		status, ok := rows[p.Type]
		switch {
		case !p.On(contract.ListenerProxy):
			if ok {
				t.Errorf("docs/request-handling.md lists %s, which the proxy listener never answers", p.Type)
			}
		case !ok:
			t.Errorf("docs/request-handling.md \"Error responses\" has no row for %s", p.Type)
		case status != p.Status:
			t.Errorf("docs/request-handling.md gives %s status %d, %s says %d", p.Type, status, contract.Path, p.Status)
		}
		delete(rows, p.Type)
	}
	for name := range rows {
		t.Errorf("docs/request-handling.md lists %s, which %s does not", name, contract.Path)
	}
}

// Every Go package of the checkout (a directory with a non-test Go file) is
// on docs/architecture.md's map: itself or a folder above it.
func TestEveryPackageIsOnTheArchitectureMap(t *testing.T) {
	arch := readDoc(t, "docs/architecture.md")
	drawing := arch[strings.Index(arch, "\n    "):]
	drawing = drawing[:strings.Index(drawing, "\n\n")]
	entryRE := regexp.MustCompile(`^    (\S+)/\s`)
	childRE := regexp.MustCompile(`^      (\S+)/\s`)
	var onMap []string
	parent := ""
	for line := range strings.Lines(drawing) {
		if m := entryRE.FindStringSubmatch(line); m != nil {
			parent = m[1]
			onMap = append(onMap, parent)
		} else if m := childRE.FindStringSubmatch(line); m != nil && parent != "" {
			onMap = append(onMap, parent+"/"+m[1])
		}
	}
	covered := func(dir string) bool {
		for d := dir; d != "."; d = filepath.ToSlash(filepath.Dir(d)) {
			if slices.Contains(onMap, d) {
				return true
			}
		}
		return false
	}
	seen := map[string]bool{}
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(d.Name(), ".go") || strings.HasSuffix(d.Name(), "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(repoRoot, filepath.Dir(path))
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(rel)
		if !seen[dir] && !covered(dir) {
			t.Errorf("package %s/ is not on docs/architecture.md's map (nor a folder above it)", dir)
		}
		seen[dir] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) < 20 {
		t.Fatalf("found %d packages, want the whole checkout's", len(seen))
	}
}
