package proxy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// identifySteps are the functions that fill a request's identity, by
// file: after them, the rest of the request path only reads it.
var identifySteps = map[string][]string{
	"handler.go":     {"ServeHTTP", "identify", "readBody"},
	"fingerprint.go": {"fingerprintAndKey"},
}

// TestIdentityIsWrittenOnlyUntilIdentify holds every file of the package
// to the identity's one rule: a field of identity (request.go) is assigned
// only by the steps up to identify. A request is named q wherever it is a
// *request, so an assignment to q.<field>, q.identity.<field> or
// q.identity, or to an element of one, anywhere else fails here with its
// position.
func TestIdentityIsWrittenOnlyUntilIdentify(t *testing.T) {
	fset, parsed := parseProductFiles(t)
	fields := structFields(t, parsed["request.go"], "identity")
	if len(fields) == 0 {
		t.Fatal("request.go declares no identity struct")
	}
	eachAssignment(parsed, func(file string, fn *ast.FuncDecl, e ast.Expr) {
		if slices.Contains(identifySteps[file], fn.Name.Name) {
			return
		}
		if field, ok := fieldWrite(e, "identity", fields); ok {
			t.Errorf("%s: %s writes the identity's %s after identify", fset.Position(e.Pos()), fn.Name.Name, field)
		}
	})
}

// executingFiles are the files that execute a key: only they write a
// request's execution (execState, request.go).
var executingFiles = []string{
	"execute.go", "detach.go", "lease.go", "capture.go", "async.go",
	"reconcile.go", "reconcilelookup.go", "reconcilemarker.go",
}

// TestExecutionIsWrittenOnlyByTheExecutingFiles holds the package to the
// execution's rule: a field of execState is assigned only in the files
// that execute a key, and by serveKeyed, which notes when Begin was sent
// and the token it took. An assignment to q.<field> or q.execState.<field>
// anywhere else fails here with its position; a new writer either belongs
// with the execution or reads the execution instead. The one exception is
// the writer of a request forwarded without a key (control.go), which
// never executes and keeps its client's writer in the capture it does not
// use, to cost the pooled request no field more.
func TestExecutionIsWrittenOnlyByTheExecutingFiles(t *testing.T) {
	fset, parsed := parseProductFiles(t)
	fields := structFields(t, parsed["request.go"], "execState")
	if len(fields) == 0 {
		t.Fatal("request.go declares no execState struct")
	}
	eachAssignment(parsed, func(file string, fn *ast.FuncDecl, e ast.Expr) {
		if slices.Contains(executingFiles, file) || file == "handler.go" && fn.Name.Name == "serveKeyed" {
			return
		}
		if file == "control.go" && fn.Name.Name == "unrecorded" {
			return // a request that never executes borrows its unused capture.rw
		}
		if field, ok := fieldWrite(e, "execState", fields); ok {
			t.Errorf("%s: %s writes the execution's %s outside the executing files", fset.Position(e.Pos()), fn.Name.Name, field)
		}
	})
}

// parseProductFiles parses the package's files, its tests left out.
func parseProductFiles(t *testing.T) (*token.FileSet, map[string]*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	parsed := map[string]*ast.File{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed[name] = f
	}
	return fset, parsed
}

// eachAssignment calls visit with every expression assigned to (or
// incremented) in a function body of the parsed files.
func eachAssignment(parsed map[string]*ast.File, visit func(file string, fn *ast.FuncDecl, e ast.Expr)) {
	for name, f := range parsed {
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch s := n.(type) {
				case *ast.AssignStmt:
					for _, e := range s.Lhs {
						visit(name, fn, e)
					}
				case *ast.IncDecStmt:
					visit(name, fn, s.X)
				}
				return true
			})
		}
	}
}

// structFields returns the field names of the struct type name in f.
func structFields(t *testing.T, f *ast.File, name string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != name {
			return true
		}
		for _, fl := range ts.Type.(*ast.StructType).Fields.List {
			for _, id := range fl.Names {
				out[id.Name] = true
			}
		}
		return false
	})
	return out
}

// fieldWrite reports whether assigning to e writes a field of the struct
// a request embeds as embed: q.<field>, q.<embed>.<field> or q.<embed>,
// or an element or field of one of them.
func fieldWrite(e ast.Expr, embed string, fields map[string]bool) (string, bool) {
	for {
		switch x := e.(type) {
		case *ast.IndexExpr:
			e = x.X
			continue
		case *ast.StarExpr:
			e = x.X
			continue
		case *ast.ParenExpr:
			e = x.X
			continue
		case *ast.SelectorExpr:
			if id, ok := x.X.(*ast.Ident); ok && id.Name == "q" {
				if fields[x.Sel.Name] || x.Sel.Name == embed {
					return x.Sel.Name, true
				}
				return "", false
			}
			if inner, ok := x.X.(*ast.SelectorExpr); ok && inner.Sel.Name == embed {
				return x.Sel.Name, true
			}
			e = x.X
			continue
		}
		return "", false
	}
}

// TestExecutionKnowsItsRouteOnlyByItsTerms holds the executing files to
// what they may know of a route: its terms (routes.go), nothing of how a
// request matched it or where its key came from. In those files a
// request's route is read only as q.route.<a field or method of terms>;
// the route passed whole, a *route or a key source named, or the
// request's key source kind read fails here with its position.
func TestExecutionKnowsItsRouteOnlyByItsTerms(t *testing.T) {
	fset, parsed := parseProductFiles(t)
	known := structFields(t, parsed["routes.go"], "terms")
	if len(known) == 0 {
		t.Fatal("routes.go declares no terms struct")
	}
	for _, f := range parsed {
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && isTermsMethod(fn) {
				known[fn.Name.Name] = true
			}
		}
	}
	for _, name := range executingFiles {
		f := parsed[name]
		if f == nil {
			t.Errorf("%s, an executing file, does not exist", name)
			continue
		}
		// parents maps each selector q.route to the selector around it;
		// fields are the names selected or keyed, which name no type.
		parents := map[ast.Node]*ast.SelectorExpr{}
		fields := map[*ast.Ident]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.SelectorExpr:
				parents[x.X], fields[x.Sel] = x, true
			case *ast.KeyValueExpr:
				if id, ok := x.Key.(*ast.Ident); ok {
					fields[id] = true
				}
			}
			return true
		})
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.SelectorExpr:
				switch x.Sel.Name {
				case "route":
					if p := parents[x]; p == nil || !known[p.Sel.Name] {
						t.Errorf("%s: an executing file reads the route beyond its terms", fset.Position(x.Pos()))
					}
				case "keyFrom":
					t.Errorf("%s: an executing file reads the key's source", fset.Position(x.Pos()))
				}
			case *ast.Ident:
				if !fields[x] && (x.Name == "route" || x.Name == "KeySource" || x.Name == "KeySourceKind") {
					t.Errorf("%s: an executing file names the type %s", fset.Position(x.Pos()), x.Name)
				}
			}
			return true
		})
	}
}

// isTermsMethod reports whether fn is a method of *terms.
func isTermsMethod(fn *ast.FuncDecl) bool {
	if fn.Recv == nil || len(fn.Recv.List) != 1 {
		return false
	}
	star, ok := fn.Recv.List[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	id, ok := star.X.(*ast.Ident)
	return ok && id.Name == "terms"
}
