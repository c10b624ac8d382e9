// Package browser holds the end-to-end tests that drive a real browser
// (headless Chromium, through chromedp) against the built binary. It is a
// module of its own, so that the product's go.mod does not require
// chromedp: nothing the proxy or its client links needs it.
package browser

import (
	"os"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
)

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }
