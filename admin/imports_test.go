package admin

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestAdminNeverImportsTheProxy holds the admin API to what it serves:
// the store's operator methods and the values the proxy hands it
// (internal/adoption) and the lease's renewal rule (proxy/execution,
// which imports nothing of proxy), never the request path itself, so that
// a change of the proxy never reaches the operator API by an import
// (docs/architecture.md).
func TestAdminNeverImportsTheProxy(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	const proxyPkg = "github.com/idempotency-proxy/idempotency-proxy/proxy"
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path == proxyPkg {
				t.Errorf("%s imports %s", name, path)
			}
		}
	}
}
