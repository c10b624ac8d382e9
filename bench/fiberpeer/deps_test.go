package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestProductBinaryDoesNotLinkFiber: Fiber and fasthttp are the benchmark's
// dependencies alone; the idempotency-proxy binary, built in the product's
// module (the checkout's root, outside the workspace), must not link them.
func TestProductBinaryDoesNotLinkFiber(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "./cmd/idempotency-proxy")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/gofiber/", "github.com/valyala/fasthttp"} {
			if strings.HasPrefix(pkg, banned) {
				t.Errorf("the idempotency-proxy binary links %s", pkg)
			}
		}
	}
}
