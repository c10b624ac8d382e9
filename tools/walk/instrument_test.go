package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

const fixture = `// Package p is a fixture.
package p

import "fmt"

var hook = func() {}

type T[K comparable] struct{}

// Get gets.
func (t *T[K]) Get() {
	defer func() { recover() }()
	fmt.Println("get") // a comment
}

func (t T[K]) value() int { return 0 }

func free() {}

func declared()
`

func TestInstrumentProbesEveryFunctionAndLiteral(t *testing.T) {
	out, err := instrument("proxy/p.go", []byte(fixture), "example.com/m/walkprobe")
	if err != nil {
		t.Fatal(err)
	}
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", out, parser.ParseComments)
	if err != nil {
		t.Fatalf("the instrumented file does not parse: %v\n%s", err, out)
	}
	var probes []string
	ast.Inspect(f, func(n ast.Node) bool {
		var body *ast.BlockStmt
		switch n := n.(type) {
		case *ast.FuncDecl:
			body = n.Body
		case *ast.FuncLit:
			body = n.Body
		}
		if body == nil {
			return true
		}
		d, ok := body.List[0].(*ast.DeferStmt)
		if !ok {
			t.Errorf("a function's first statement is not the probe:\n%s", out)
			return true
		}
		enter := d.Call.Args[0].(*ast.CallExpr)
		probes = append(probes, enter.Args[0].(*ast.BasicLit).Value+" "+enter.Args[1].(*ast.BasicLit).Value)
		return true
	})
	want := []string{
		`"proxy/p.go" "init.func"`,
		`"proxy/p.go" "(*T).Get"`,
		`"proxy/p.go" "(*T).Get.func"`,
		`"proxy/p.go" "T.value"`,
		`"proxy/p.go" "free"`,
	}
	if strings.Join(probes, "\n") != strings.Join(want, "\n") {
		t.Errorf("probes:\n%s\nwant:\n%s", strings.Join(probes, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(string(out), `import "example.com/m/walkprobe"`) {
		t.Errorf("the probe package is not imported:\n%s", out)
	}
	if !strings.Contains(string(out), "// a comment") {
		t.Errorf("comments are lost:\n%s", out)
	}
}

func TestInstrumentLeavesAFileWithoutFunctionsAsItIs(t *testing.T) {
	src := "package p\n\nconst c = 1\n"
	out, err := instrument("proxy/c.go", []byte(src), "example.com/m/walkprobe")
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != src {
		t.Errorf("got\n%s\nwant it unchanged", out)
	}
}

func TestShortNameMatchesFuncName(t *testing.T) {
	for runtime, want := range map[string]string{
		"github.com/o/m/proxy.(*Handler).ServeHTTP":                                               "(*Handler).ServeHTTP",
		"github.com/o/m/proxy/execution.(*Callers[go.shape.*github.com/o/m/proxy.request]).serve": "(*Callers).serve",
		"github.com/o/m/proxy.(*Handler).serveUpstream.func1":                                     "(*Handler).serveUpstream.func1",
		"github.com/o/m/store.LookupKey":                                                          "LookupKey",
	} {
		if got := shortName(runtime); got != want {
			t.Errorf("shortName(%q) = %q, want %q", runtime, got, want)
		}
	}
}
