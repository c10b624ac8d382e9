package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestProductBinaryDoesNotLinkFiber: Fiber and fasthttp are the benchmark's
// dependencies alone; the idempotency-proxy binary must not link them.
func TestProductBinaryDoesNotLinkFiber(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/idempotency-proxy/idempotency-proxy/cmd/idempotency-proxy").CombinedOutput()
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
