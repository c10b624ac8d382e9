package e2e

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Secrets a client sends, each unlike anything else the proxy prints.
const (
	secretBearer = "Bearer sekrit-bearer-7f3a"
	secretCookie = "sekrit-cookie-9c1e"
	secretKey    = "sekrit-key-4b2d"
	secretBody   = "sekrit-body-1e5f"
	secretAdmin  = "sekrit-admin-8d0c"
)

var fullKeyHash = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TestSecretsNeverReachLogsMetricsOrTraces drives one proxy through the
// outcomes that log a key — executed, replayed, in flight, mismatch, a key
// too long, a missing key, an admin lookup — at debug level with tracing on,
// and then looks for the client's bearer token, cookie, raw key, request
// body and the admin token in every log line, in /metrics and in every
// exported span (docs/guarantees.md, "Secrets stay out of what the proxy
// prints"). Every log line that names a key names it by its full key_hash.
func TestSecretsNeverReachLogsMetricsOrTraces(t *testing.T) {
	col := startCollector(t)
	up := startUpstream(t)
	cfg := proxyConfig{
		Upstream: up.URL(),
		Memory:   true,
		Defaults: map[string]string{"scope_headers": "[Authorization, \"Cookie:sid\"]"},
		Routes:   []routeConfig{{Match: "POST /v1/charges", Keys: map[string]string{"require_key": "true"}}},
		Extra:    "tracing:\n  enabled: true\n",
		Env:      append(collectorEnv(col), "IDEMPOTENCY_PROXY_ADMIN_TOKEN="+secretAdmin, "IDEMPOTENCY_PROXY_LOG_LEVEL=debug"),
	}
	p := startProxy(t, "secrets", cfg)
	c := newClient(t, 10*time.Second)
	hdr := func(extra ...string) map[string]string {
		h := map[string]string{"Authorization": secretBearer, "Cookie": "sid=" + secretCookie, "Content-Type": "application/json"}
		for i := 0; i+1 < len(extra); i += 2 {
			h[extra[i]] = extra[i+1]
		}
		return h
	}
	body := `{"card":"` + secretBody + `"}`

	if r := mustSend(t, c, p.URL(), request{Path: "/v1/charges", Key: secretKey, Body: body, Header: hdr()}); r.Status != http.StatusCreated {
		t.Fatalf("first request: %s", r)
	}
	if r := mustSend(t, c, p.URL(), request{Path: "/v1/charges", Key: secretKey, Body: body, Header: hdr()}); !r.Replayed() {
		t.Fatalf("retry: %s, want a replay", r)
	}
	if r := mustSend(t, c, p.URL(), request{Path: "/v1/charges", Key: secretKey, Body: body + " ", Header: hdr()}); r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("other payload: %s, want 422", r)
	}
	held := make(chan reply, 1)
	go func() {
		held <- send(context.Background(), c, p.URL(), request{Path: "/v1/charges", Key: secretKey + "-held", Body: body, Header: hdr(hdrHold, "1")})
	}()
	t.Cleanup(up.Unhold)
	up.WaitCount(secretKey+"-held", 1, 5*time.Second)
	if r := mustSend(t, c, p.URL(), request{Path: "/v1/charges", Key: secretKey + "-held", Body: body, Header: hdr()}); r.Status != http.StatusConflict {
		t.Fatalf("duplicate in flight: %s, want 409", r)
	}
	up.Unhold()
	if r := <-held; r.Status != http.StatusCreated {
		t.Fatalf("held request: %s", r)
	}
	if r := mustSend(t, c, p.URL(), request{Path: "/v1/charges", Key: secretKey + strings.Repeat("x", 300), Body: body, Header: hdr()}); r.Status != http.StatusBadRequest {
		t.Fatalf("key over 255 bytes: %s, want 400", r)
	}
	if r := mustSend(t, c, p.URL(), request{Path: "/v1/charges", Body: body, Header: hdr()}); r.Status != http.StatusBadRequest {
		t.Fatalf("no key on a require_key route: %s, want 400", r)
	}
	for _, auth := range []string{"Bearer " + secretAdmin, "Bearer wrong-" + secretAdmin} {
		req, _ := http.NewRequest("GET", p.AdminURL()+"/admin/keys?state=all", nil)
		req.Header.Set("Authorization", auth)
		if res, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	}

	metrics := get(t, p.AdminURL()+"/metrics")
	p.Signal(syscall.SIGTERM) // the exporter flushes at exit
	if code, ok := p.Wait(30 * time.Second); !ok || code != 0 {
		t.Fatalf("proxy exit after SIGTERM: %d (exited: %v)", code, ok)
	}
	spans, _ := col.Spans()
	if len(spans) == 0 {
		t.Fatal("no span exported: the trace scan would prove nothing")
	}
	var traced strings.Builder
	for _, s := range spans {
		traced.WriteString(s.GetName() + "\n")
		for _, kv := range s.GetAttributes() {
			traced.WriteString(kv.GetKey() + "=" + anyValue(kv.GetValue()) + "\n")
		}
		for _, e := range s.GetEvents() {
			traced.WriteString(e.GetName() + "\n")
			for _, kv := range e.GetAttributes() {
				traced.WriteString(kv.GetKey() + "=" + anyValue(kv.GetValue()) + "\n")
			}
		}
		traced.WriteString(s.GetStatus().GetMessage() + "\n")
	}

	logs := p.Logs()
	for what, text := range map[string]string{"the logs": logs, "/metrics": metrics, "the exported spans": traced.String()} {
		for _, secret := range []string{strings.TrimPrefix(secretBearer, "Bearer "), secretCookie, secretKey, secretBody, secretAdmin} {
			if i := strings.Index(text, secret); i >= 0 {
				t.Errorf("%s hold %q: …%s…", what, secret, text[max(0, i-120):min(len(text), i+len(secret)+40)])
			}
		}
	}

	named := 0
	for _, line := range p.logLines(nil) {
		kh, ok := line["key_hash"]
		if !ok || kh == "" { // a request without a valid key has none to name
			continue
		}
		named++
		if s, _ := kh.(string); !fullKeyHash.MatchString(s) {
			t.Errorf("log line %q names its key as %v, want the full 32-digit key_hash", line["msg"], kh)
		}
	}
	if named < 5 {
		t.Errorf("%d log lines name a key, want one per keyed request at least", named)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
