package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"strconv"
)

// instrument returns src, the file rel of the module, with a probe as the
// first statement of every function, method and function literal:
//
//	defer walkprobe.Exit(walkprobe.Enter("proxy/handler.go", "(*Handler).ServeHTTP"))
//
// A function literal is named for the function around it, with ".func":
// it counts as its enclosing file. src is returned as it is when it has
// no function body.
func instrument(rel string, src []byte, probePath string) ([]byte, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	probes := 0
	for _, decl := range f.Decls {
		name := "init" // a package-level variable's function literals
		if fn, ok := decl.(*ast.FuncDecl); ok {
			name = funcName(fn)
		}
		ast.Inspect(decl, func(n ast.Node) bool {
			var body *ast.BlockStmt
			fn := name
			switch n := n.(type) {
			case *ast.FuncDecl:
				body = n.Body
			case *ast.FuncLit:
				body, fn = n.Body, name+".func"
			}
			if body != nil {
				body.List = append([]ast.Stmt{probe(rel, fn)}, body.List...)
				probes++
			}
			return true
		})
	}
	if probes == 0 {
		return src, nil
	}
	imp := &ast.ImportSpec{Path: &ast.BasicLit{Kind: token.STRING, Value: strconv.Quote(probePath)}}
	f.Decls = append([]ast.Decl{&ast.GenDecl{Tok: token.IMPORT, Specs: []ast.Spec{imp}}}, f.Decls...)
	var out bytes.Buffer
	if err := printer.Fprint(&out, fset, f); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// probe is the statement entering fn of file, and leaving it on return.
func probe(file, fn string) ast.Stmt {
	call := func(name string, args ...ast.Expr) *ast.CallExpr {
		return &ast.CallExpr{Fun: &ast.SelectorExpr{X: ast.NewIdent("walkprobe"), Sel: ast.NewIdent(name)}, Args: args}
	}
	str := func(s string) ast.Expr { return &ast.BasicLit{Kind: token.STRING, Value: strconv.Quote(s)} }
	return &ast.DeferStmt{Call: call("Exit", call("Enter", str(file), str(fn)))}
}

// funcName names a function as a stack trace does, without type
// parameters: "New", "(*Handler).ServeHTTP", "(*Callers).Start".
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	recv, star := fn.Recv.List[0].Type, false
	if s, ok := recv.(*ast.StarExpr); ok {
		recv, star = s.X, true
	}
	switch r := recv.(type) {
	case *ast.IndexExpr:
		recv = r.X
	case *ast.IndexListExpr:
		recv = r.X
	}
	name := "?"
	if id, ok := recv.(*ast.Ident); ok {
		name = id.Name
	}
	if star {
		return "(*" + name + ")." + fn.Name.Name
	}
	return name + "." + fn.Name.Name
}
