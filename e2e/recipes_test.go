package e2e

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
)

// The recipes of docs/recipes.md, as written there, against the built
// binary on both stores: each client that cannot send a key gets one
// execution per operation.

var recipes = []string{
	"GitHub webhook receiver",
	"Stripe webhook receiver",
	"Partner API keyed by an order id",
	"Legacy form posts",
}

// recipeRoutes returns the routes: entries of every recipe's YAML block,
// as one list.
func recipeRoutes(t *testing.T) string {
	t.Helper()
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "recipes.md"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("routes:\n")
	for _, name := range recipes {
		block := yamlBlock(t, markdownSection(t, string(doc), name))
		entries, ok := strings.CutPrefix(block, "routes:\n")
		if !ok {
			t.Fatalf("recipe %q: its YAML does not start with routes:\n%s", name, block)
		}
		b.WriteString(entries)
	}
	return b.String()
}

// yamlBlock returns the one ```yaml block of a section.
func yamlBlock(t *testing.T, section string) string {
	t.Helper()
	_, rest, ok := strings.Cut(section, "```yaml\n")
	if !ok {
		t.Fatalf("no ```yaml block in:\n%s", section)
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok || strings.Contains(rest[len(block):], "```yaml") {
		t.Fatalf("want exactly one closed ```yaml block in:\n%s", section)
	}
	return block
}

func TestRecipes(t *testing.T) {
	routes := recipeRoutes(t)
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			up := startUpstream(t)
			cfg := proxyConfig{Upstream: up.URL(), UpstreamTimeout: 10 * time.Second, Memory: kind == "memory", Extra: routes}
			if kind == "redis" {
				cfg.RedisURL = redistest.Start(t).URL()
			}
			p := startProxy(t, "recipes-"+kind, cfg)
			c := recipeClient{t: t, base: p.URL(), up: up}
			t.Run("github", c.github)
			t.Run("stripe", c.stripe)
			t.Run("partner", c.partner)
			t.Run("legacy form", c.legacyForm)
		})
	}
}

type recipeClient struct {
	t    *testing.T
	base string
	up   *upstream
}

type recipeResponse struct {
	status   int
	replayed bool
	body     string
}

func (c recipeClient) post(t *testing.T, path, contentType, body string, header ...string) recipeResponse {
	t.Helper()
	req, err := http.NewRequest("POST", c.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return recipeResponse{status: res.StatusCode, replayed: res.Header.Get("Idempotent-Replayed") == "true", body: string(b)}
}

// executes checks that f causes exactly n upstream executions.
func (c recipeClient) executes(t *testing.T, what string, n int, f func()) {
	t.Helper()
	before := c.up.Total()
	f()
	if got := c.up.Total() - before; got != n {
		t.Errorf("%s: %d upstream executions, want %d", what, got, n)
	}
}

func wantReplayOf(t *testing.T, what string, got, first recipeResponse) {
	t.Helper()
	if !got.replayed || got.status != first.status || got.body != first.body {
		t.Errorf("%s: %d replayed=%v %q, want the first response %d %q replayed", what, got.status, got.replayed, got.body, first.status, first.body)
	}
}

func wantStatus(t *testing.T, what string, got recipeResponse, status int, problem string) {
	t.Helper()
	if got.status != status || !strings.Contains(got.body, problem) {
		t.Errorf("%s: %d %s, want %d %s", what, got.status, got.body, status, problem)
	}
}

func (c recipeClient) github(t *testing.T) {
	const event = `{"action":"opened","number":7}`
	var first recipeResponse
	c.executes(t, "a delivery and its redelivery", 1, func() {
		first = c.post(t, "/webhooks/github", "application/json", event, "X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
		again := c.post(t, "/webhooks/github", "application/json", event, "X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
		wantReplayOf(t, "redelivery", again, first)
	})
	c.executes(t, "another delivery", 1, func() {
		if r := c.post(t, "/webhooks/github", "application/json", event, "X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0959"); r.replayed {
			t.Error("another delivery id was replayed")
		}
	})
	c.executes(t, "no delivery id", 0, func() {
		wantStatus(t, "no delivery id", c.post(t, "/webhooks/github", "application/json", event), 400, "missing-key")
	})
}

func (c recipeClient) stripe(t *testing.T) {
	const event = `{"id":"evt_1PqL8e2eZvKYlo2C","type":"charge.succeeded","data":{"object":{"id":"ch_1"}}}`
	c.executes(t, "an event and its retry", 1, func() {
		first := c.post(t, "/webhooks/stripe", "application/json", event, "Stripe-Signature", "t=1718000000,v1=aaa")
		again := c.post(t, "/webhooks/stripe", "application/json", event, "Stripe-Signature", "t=1718000060,v1=bbb")
		wantReplayOf(t, "retry with a new signature", again, first)
	})
	c.executes(t, "a body without an id", 0, func() {
		wantStatus(t, "a body without an id", c.post(t, "/webhooks/stripe", "application/json", `{"type":"ping"}`), 400, "missing-key")
		wantStatus(t, "a body that is not JSON", c.post(t, "/webhooks/stripe", "application/json", `{"id":`), 400, "missing-key")
	})
}

func (c recipeClient) partner(t *testing.T) {
	var first recipeResponse
	c.executes(t, "an order and its retry with a new sent_at", 1, func() {
		first = c.post(t, "/partner/orders", "application/json", `{"order_id":"po-1001","amount":2500,"sent_at":"2026-11-30T10:00:00Z"}`)
		again := c.post(t, "/partner/orders", "application/json", `{"sent_at":"2026-11-30T10:00:30Z","order_id":"po-1001","amount":2500}`)
		wantReplayOf(t, "retry with a new sent_at", again, first)
	})
	c.executes(t, "the same order id with another amount", 0, func() {
		r := c.post(t, "/partner/orders", "application/json", `{"order_id":"po-1001","amount":9900,"sent_at":"2026-11-30T10:01:00Z"}`)
		wantStatus(t, "another amount", r, 422, "payload-mismatch")
	})
	c.executes(t, "the same order id cancelled", 1, func() {
		r := c.post(t, "/partner/orders/cancel", "application/json", `{"order_id":"po-1001","sent_at":"2026-11-30T10:02:00Z"}`)
		if r.status != http.StatusCreated || r.replayed {
			t.Errorf("cancel of the order: %d replayed=%v %s, want its own execution", r.status, r.replayed, r.body)
		}
	})
}

func (c recipeClient) legacyForm(t *testing.T) {
	const form = "application/x-www-form-urlencoded"
	c.executes(t, "a double submit", 1, func() {
		first := c.post(t, "/legacy/order.php", form, "item=42&qty=1")
		again := c.post(t, "/legacy/order.php", form, "item=42&qty=1")
		wantReplayOf(t, "double submit", again, first)
	})
	c.executes(t, "another form", 1, func() {
		if r := c.post(t, "/legacy/order.php", form, "item=42&qty=2"); r.replayed {
			t.Error("another form body was replayed")
		}
	})
}
