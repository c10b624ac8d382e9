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

// identifySteps are the functions that fill a request's identity, all in
// handler.go: after them, the rest of the request path only reads it.
var identifySteps = []string{"ServeHTTP", "identify", "readBody", "fingerprint"}

// TestIdentityIsWrittenOnlyUntilIdentify holds every file of the package
// to the identity's one rule: a field of identity (request.go) is assigned
// only by the steps up to identify. A request is named q wherever it is a
// *request, so an assignment to q.<field>, q.identity.<field> or
// q.identity, or to an element of one, anywhere else fails here with its
// position.
func TestIdentityIsWrittenOnlyUntilIdentify(t *testing.T) {
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
	fields := identityFields(t, parsed["request.go"])
	if len(fields) == 0 {
		t.Fatal("request.go declares no identity struct")
	}
	for name, f := range parsed {
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			if name == "handler.go" && slices.Contains(identifySteps, fn.Name.Name) {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				var lhs []ast.Expr
				switch s := n.(type) {
				case *ast.AssignStmt:
					lhs = s.Lhs
				case *ast.IncDecStmt:
					lhs = []ast.Expr{s.X}
				}
				for _, e := range lhs {
					if field, ok := identityWrite(e, fields); ok {
						t.Errorf("%s: %s writes the identity's %s after identify", fset.Position(e.Pos()), fn.Name.Name, field)
					}
				}
				return true
			})
		}
	}
}

// identityFields returns the field names of the identity struct in f.
func identityFields(t *testing.T, f *ast.File) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "identity" {
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

// identityWrite reports whether assigning to e writes a field of a
// request's identity: q.<field>, q.identity.<field> or q.identity, or an
// element or field of one of them.
func identityWrite(e ast.Expr, fields map[string]bool) (string, bool) {
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
				if fields[x.Sel.Name] || x.Sel.Name == "identity" {
					return x.Sel.Name, true
				}
				return "", false
			}
			if inner, ok := x.X.(*ast.SelectorExpr); ok && inner.Sel.Name == "identity" {
				return x.Sel.Name, true
			}
			e = x.X
			continue
		}
		return "", false
	}
}
