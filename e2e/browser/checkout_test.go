package browser

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/faultnet"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/testbin"
)

// The checkout example (examples/checkout/) in headless Chromium, through
// the built proxy (memory store), in front of the demo upstream run with --site and
// --delay: whatever the user does, the upstream logs one execution per
// order. The browser reaches the proxy through a TCP fault proxy, so a test
// can cut its connections.

// checkoutDelay is how long the demo upstream takes per charge: long enough
// for a test to act while the charge runs — a reload of the page on a busy
// machine included —, short enough that a page resuming the charge, which
// asks again every second (Retry-After), stays within its ten attempts.
// Nothing waits for it to pass; every wait is for something the page or
// the upstream shows.
const checkoutDelay = 3 * time.Second

// readyTimeout bounds how long the proxy and the upstream may take to start.
const readyTimeout = 15 * time.Second

type checkout struct {
	t        *testing.T
	upstream *testbin.Process
	net      *faultnet.Proxy
	browser  context.Context
}

func startCheckout(t *testing.T) *checkout {
	t.Helper()
	chromium := testbin.Tool(t, "chromium", "")
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	upAddr := testbin.FreeAddr(t)
	up := testbin.Start(t, testbin.Command{Path: testbin.Upstream.Path(t),
		Args: []string{"--listen", upAddr, "--site", root, "--delay", checkoutDelay.String()}})
	testbin.WaitOutput(t, up, up.Stderr, "listening on", readyTimeout)
	fault := faultnet.Start(t, startProxy(t, "http://"+upAddr))

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(browser); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return &checkout{t: t, upstream: up, net: fault, browser: browser}
}

func (c *checkout) run(actions ...chromedp.Action[chromedp.Void]) {
	c.t.Helper()
	if err := chromedp.Do(c.browser, actions...); err != nil {
		c.t.Fatalf("browser: %v\nupstream:\n%s", err, c.upstream.Stderr())
	}
}

// open loads the page for order.
func (c *checkout) open(order string) {
	c.t.Helper()
	c.run(chromedp.Navigate(fmt.Sprintf("http://%s/examples/checkout/?order=%s", c.net.Addr(), order)),
		chromedp.WaitVisible(chromedp.ID("pay")))
}

func (c *checkout) pay() { c.t.Helper(); c.run(chromedp.Click(chromedp.ID("pay"))) }

// charges are the upstream's executions of order, each with the key it carried.
func (c *checkout) charges(order string) []string {
	re := regexp.MustCompile(`execution \d+: POST /v1/charges\?order=` + regexp.QuoteMeta(order) + ` \(Idempotency-Key: "([^"]*)"\)`)
	var keys []string
	for _, m := range re.FindAllStringSubmatch(c.upstream.Stderr(), -1) {
		keys = append(keys, m[1])
	}
	return keys
}

// chargeStarted waits until the upstream logs the first execution of order.
func (c *checkout) chargeStarted(order string) {
	c.t.Helper()
	testbin.WaitOutput(c.t, c.upstream, c.upstream.Stderr, "POST /v1/charges?order="+order+" ", readyTimeout)
}

// shown is what the page shows once it has a confirmation.
type shown struct {
	Text     string `json:"text"`
	Replayed bool   `json:"replayed"`
	Key      string `json:"key"`
}

// confirmation waits for the page's confirmation.
func (c *checkout) confirmation() shown {
	c.t.Helper()
	got, err := chromedp.Run(c.browser, chromedp.Poll[shown](`(() => {
		const r = document.getElementById("result");
		return r.hidden ? null : {text: r.textContent, replayed: r.className === "replayed",
			key: document.getElementById("key").textContent};
	})()`, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second)))
	if err != nil {
		c.t.Fatalf("no confirmation on the page: %v\nupstream:\n%s", err, c.upstream.Stderr())
	}
	return got
}

// statusShows waits until the page's status line contains substr.
func (c *checkout) statusShows(substr string) {
	c.t.Helper()
	_, err := chromedp.Run(c.browser, chromedp.PollFunction[bool](`(s) => document.getElementById("status").textContent.includes(s)`,
		chromedp.WithPollingArgs(substr), chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second)))
	if err != nil {
		c.t.Fatalf("the page's status never showed %q: %v", substr, err)
	}
}

func TestCheckoutDoubleClickIsOneCharge(t *testing.T) {
	c := startCheckout(t)
	c.open("double")
	c.run(chromedp.Click(chromedp.ID("pay")), chromedp.Click(chromedp.ID("pay")))
	got := c.confirmation()
	if keys := c.charges("double"); len(keys) != 1 {
		t.Fatalf("upstream executed %d charges for a double click, want 1: %q", len(keys), keys)
	}
	if !strings.Contains(got.Text, "execution #") {
		t.Errorf("confirmation %q", got.Text)
	}
}

func TestCheckoutReloadMidChargeResumesWithTheSameKey(t *testing.T) {
	c := startCheckout(t)
	c.open("reload")
	c.pay()
	c.chargeStarted("reload")
	// The charge is running upstream (for checkoutDelay): reload now.
	c.run(chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("pay")))
	got := c.confirmation()
	keys := c.charges("reload")
	if len(keys) != 1 {
		t.Fatalf("upstream executed %d charges across a reload, want 1: %q", len(keys), keys)
	}
	if !got.Replayed {
		t.Errorf("confirmation %q after the reload is not marked replayed", got.Text)
	}
	if got.Key != keys[0] {
		t.Errorf("the reloaded page used key %q, the charge ran with %q", got.Key, keys[0])
	}
	if !strings.Contains(got.Text, "execution #") {
		t.Errorf("confirmation %q", got.Text)
	}
}

func TestCheckoutOfflineMidChargeIsOneCharge(t *testing.T) {
	c := startCheckout(t)
	c.open("offline")
	c.pay()
	c.chargeStarted("offline")
	// The network goes: the request's connection is cut and no new one
	// gets through, until the page has retried at least once in vain.
	c.net.Refuse(true)
	c.net.ResetAll()
	c.statusShows("network")
	c.net.Refuse(false)
	got := c.confirmation()
	if keys := c.charges("offline"); len(keys) != 1 {
		t.Fatalf("upstream executed %d charges across a network cut, want 1: %q", len(keys), keys)
	}
	if !strings.Contains(got.Text, "execution #") {
		t.Errorf("confirmation %q", got.Text)
	}
}

// startProxy runs the built proxy in front of upstream with the memory
// store, on free loopback ports, and returns its listener's address once
// it is ready.
func startProxy(t *testing.T, upstream string) string {
	t.Helper()
	listen, admin := testbin.FreeAddr(t), testbin.FreeAddr(t)
	config := filepath.Join(t.TempDir(), "checkout.yaml")
	yaml := fmt.Sprintf("listen: %q\nadmin_listen: %q\nupstream:\n  url: %q\nstore:\n  kind: memory\n", listen, admin, upstream)
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	p := testbin.Start(t, testbin.Command{Path: testbin.Proxy.Path(t), Args: []string{"--config", config}})
	if err := p.WaitReady(readyTimeout, "http://"+admin+"/healthz", "http://"+admin+"/readyz"); err != nil {
		t.Fatalf("the proxy did not start: %v\n%s", err, p.Stderr())
	}
	return listen
}
