package e2e

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/proxy"
)

// mShadow is the counter of what a shadow route would have done
// (docs/operating.md#metrics).
const mShadow = "idempotency_proxy_shadow_total"

// shadowRoute is a route in shadow mode that, enforced, would refuse or
// replay most of what TestShadowRouteAnswersAsAPlainReverseProxy sends: it
// requires a key, takes small bodies and would advertise expiry.
func shadowRoute(mode string) routeConfig {
	return routeConfig{Match: "POST /v1/charges", Keys: map[string]string{
		"mode":             mode,
		"require_key":      "true",
		"max_request_body": "64",
		"advertise_expiry": "true",
	}}
}

// plainReverseProxy is the load benchmark's baseline (bench/loadbench,
// plainProxy): a stock httputil.ReverseProxy with the product's transport.
func plainReverseProxy(t *testing.T, upstream string) *httptest.Server {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
		},
		Transport: proxy.NewTransport(),
	})
	t.Cleanup(srv.Close)
	return srv
}

// shadowCase is one request of the comparison: sent once to the shadow
// proxy and once to the plain reverse proxy, each in front of an upstream
// of its own that has seen the same requests before.
type shadowCase struct {
	key, body string
	header    map[string]string
}

// answer sends c to base and returns the response as bytes, Date left out
// (the one header a second apart may differ).
func (c shadowCase) answer(t *testing.T, base string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/charges", strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.key != "" {
		req.Header.Set("Idempotency-Key", c.key)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST %s key %q: %v", base, c.key, err)
	}
	defer resp.Body.Close()
	resp.Header.Del("Date")
	b, err := httputil.DumpResponse(resp, true)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	return string(b)
}

// TestShadowRouteAnswersAsAPlainReverseProxy sends duplicates, a
// mismatch, a missing key, a body over the limit, a concurrent duplicate
// and, with the store stopped, a new key to a route in shadow mode, and the
// same requests to a plain httputil.ReverseProxy: every answer is the same
// bytes (each proxy's upstream counts its executions in its answers, so a
// replay or a refusal would show), and the shadow counter says what enforce
// would have done with each.
func TestShadowRouteAnswersAsAPlainReverseProxy(t *testing.T) {
	srv := redistest.Start(t)
	upShadow, upPlain := startUpstream(t), startUpstream(t)
	cfg := baseConfig(upShadow, srv.URL())
	cfg.Routes = []routeConfig{shadowRoute("shadow")}
	p := startProxy(t, "shadow", cfg)
	plain := plainReverseProxy(t, upPlain.URL())

	same := func(name string, c shadowCase) {
		t.Helper()
		got, want := c.answer(t, p.URL()), c.answer(t, plain.URL)
		if got != want {
			t.Errorf("%s: the shadow route answered\n%s\nthe plain reverse proxy\n%s", name, got, want)
		}
	}
	same("first request", shadowCase{key: "k1", body: `{"amount":1}`})
	same("duplicate", shadowCase{key: "k1", body: `{"amount":1}`})
	same("another duplicate", shadowCase{key: "k1", body: `{"amount":1}`})
	same("mismatch", shadowCase{key: "k1", body: `{"amount":2}`})
	same("missing key", shadowCase{body: `{"amount":3}`})
	same("body over max_request_body", shadowCase{key: "k2", body: `{"note":"` + strings.Repeat("x", 100) + `"}`})

	// A duplicate while the first is held upstream: enforce would answer
	// 409 in-flight.
	held := shadowCase{key: "k3", body: `{"amount":4}`, header: map[string]string{hdrHold: "1"}}
	dup := shadowCase{key: "k3", body: `{"amount":4}`}
	firsts := map[string]chan string{}
	for name, via := range map[string]struct {
		base string
		up   *upstream
	}{"shadow": {p.URL(), upShadow}, "plain": {plain.URL, upPlain}} {
		first := make(chan string, 1)
		firsts[name] = first
		go func() { first <- held.answer(t, via.base) }()
		via.up.WaitCount("k3", 1, 10*time.Second)
	}
	same("concurrent duplicate", dup)
	upShadow.Unhold()
	upPlain.Unhold()
	if got, want := <-firsts["shadow"], <-firsts["plain"]; got != want {
		t.Errorf("held first request: the shadow route answered\n%s\nthe plain reverse proxy\n%s", got, want)
	}

	srv.Kill()
	same("store stopped", shadowCase{key: "k4", body: `{"amount":5}`})

	for would, want := range map[string]float64{
		"replay": 2, "mismatch": 1, "missing_key": 1, "too_large": 1, "conflict": 1, "store_unavailable": 1,
		"invalid_key": 0, "ambiguous": 0,
	} {
		labels := map[string]string{"route": "POST /v1/charges", "would": would}
		if got := metricSum(t, mShadow, labels, p); got != want {
			t.Errorf("%s{would=%q} = %v, want %v", mShadow, would, got, want)
		}
	}
}

// TestShadowRecordsSoEnforceStartsWarm runs a key through a route in
// shadow mode, reloads the route to enforce, and sends the key again: the
// response recorded under shadow is replayed, not executed a second time.
func TestShadowRecordsSoEnforceStartsWarm(t *testing.T) {
	up := startUpstream(t)
	cfg := baseConfig(up, "")
	cfg.Memory = true
	cfg.Routes = []routeConfig{shadowRoute("shadow")}
	p := startProxy(t, "shadow-warm", cfg)
	c := shadowCase{key: "warm", body: `{"amount":1}`}
	c.answer(t, p.URL())
	if n := up.Count("warm"); n != 1 {
		t.Fatalf("upstream executed the key %d times under shadow, want 1", n)
	}

	cfg.Routes = []routeConfig{shadowRoute("enforce")}
	if err := os.WriteFile(p.config, []byte(cfg.yaml(p.listen, p.admin)), 0o600); err != nil {
		t.Fatal(err)
	}
	p.Signal(syscall.SIGHUP)
	waitForValue(t, "a reload", func() string {
		if len(p.logLines(map[string]string{"msg": "config reloaded"})) > 0 {
			return "reloaded"
		}
		return "not yet"
	}, "reloaded")

	got := c.answer(t, p.URL())
	if n := up.Count("warm"); n != 1 {
		t.Fatalf("after the switch to enforce the upstream executed the key %d times, want 1 (a replay)", n)
	}
	if want := up.onlyExecution(t, "warm").Body; !strings.HasSuffix(got, want) {
		t.Errorf("after the switch to enforce the key was answered\n%s\nwant the response recorded under shadow, ending %q", got, want)
	}
}
