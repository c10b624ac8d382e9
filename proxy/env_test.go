package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/idempotency-proxy/idempotency-proxy/internal/problemjson"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// upstream is a test upstream that counts the requests it executes.
type upstream struct {
	srv   *httptest.Server
	calls atomic.Int64

	mu      sync.Mutex
	handler http.HandlerFunc
	seen    []*http.Request
}

func newUpstream(t *testing.T, h http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{handler: h}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := u.calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		u.mu.Lock()
		u.seen = append(u.seen, r)
		h := u.handler
		u.mu.Unlock()
		if h == nil {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Execution", itoa(n))
			w.WriteHeader(http.StatusCreated)
			json.NewEncoder(w).Encode(map[string]any{"execution": n, "body": string(body)})
			return
		}
		h(w, r)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) url(t *testing.T) *url.URL {
	t.Helper()
	p, err := url.Parse(u.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (u *upstream) last() *http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen[len(u.seen)-1]
}

// env is a proxy in front of a test upstream, served on a real socket.
type env struct {
	up      *upstream
	handler *Handler
	srv     *httptest.Server
	reg     *prometheus.Registry
	store   Store
}

type envOption func(*Options)

func withPolicy(f func(*Policy)) envOption {
	return func(o *Options) { f(&o.Default) }
}

func withStore(s Store) envOption { return func(o *Options) { o.Store = s } }

func newEnv(t *testing.T, h http.HandlerFunc, opts ...envOption) *env {
	t.Helper()
	e := &env{up: newUpstream(t, h), reg: prometheus.NewRegistry()}
	o := Options{
		Upstream: e.up.url(t),
		Default:  DefaultPolicy(),
		Metrics:  NewMetrics(e.reg, "test"),
	}
	for _, f := range opts {
		f(&o)
	}
	if o.Store == nil {
		st := memory.New(memory.Options{})
		t.Cleanup(func() { st.Close() })
		o.Store = st
	}
	e.store = o.Store
	var err error
	e.handler, err = New(o)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewUnstartedServer(e.handler)
	if envOverH2C {
		// The proxy listener's protocols, and a client speaking HTTP/2
		// to it with prior knowledge.
		e.srv.Config.Protocols = new(http.Protocols)
		e.srv.Config.Protocols.SetHTTP1(true)
		e.srv.Config.Protocols.SetUnencryptedHTTP2(true)
	}
	e.srv.Start()
	if envOverH2C {
		tr := e.srv.Client().Transport.(*http.Transport)
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	t.Cleanup(e.srv.Close)
	return e
}

// envOverH2C makes newEnv's client speak HTTP/2 without TLS to the
// proxy (TestEverythingOverHTTP2); the upstream stays HTTP/1.1.
var envOverH2C bool

// do sends a request to the proxy; header pairs follow the body.
// keyHash is the storage key of key on a POST to /x, as the key API
// computes it.
func (e *env) keyHash(t *testing.T, key string) string {
	t.Helper()
	h, err := e.handler.KeyHashFrom(httptest.NewRequest("POST", "/x", nil), key, "")
	if err != nil {
		t.Fatalf("KeyHashFrom(%q): %v", key, err)
	}
	return h
}

func (e *env) do(t *testing.T, method, path, key, body string, header ...string) *response {
	t.Helper()
	return e.doCtx(t, context.Background(), method, path, key, body, header...)
}

func (e *env) doCtx(t *testing.T, ctx context.Context, method, path, key, body string, header ...string) *response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if envOverH2C && res.ProtoMajor != 2 {
		t.Fatalf("%s %s: answered over %s, want HTTP/2", method, path, res.Proto)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return &response{Response: res, body: string(b)}
}

// request builds a keyed JSON POST to the proxy, for tests that read the
// response themselves.
func (e *env) request(t *testing.T, ctx context.Context, path, key string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", e.srv.URL+path, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	return req
}

type response struct {
	*http.Response
	body string
}

func (r *response) replayed() bool { return r.Header.Get("Idempotent-Replayed") == "true" }

// problemType returns the type of a problem+json body, "" for other bodies.
func (r *response) problemType() string {
	if r.Header.Get("Content-Type") != "application/problem+json" {
		return ""
	}
	var p struct{ Type string }
	json.Unmarshal([]byte(r.body), &p)
	return strings.TrimPrefix(p.Type, problemjson.Base)
}

func (e *env) outcomes(route string, o Outcome) float64 {
	return testutil.ToFloat64(e.handler.metrics.requests.WithLabelValues(route, string(o)))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// retryUntilSettled repeats a POST of key until the key is no longer in
// flight (409) and returns the first other answer.
func (e *env) retryUntilSettled(t *testing.T, key string) *response {
	t.Helper()
	var r *response
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		r = e.do(t, "POST", "/x", key, "{}")
		if r.StatusCode == http.StatusConflict {
			return fmt.Errorf("the key is still in flight: %d %s", r.StatusCode, r.body)
		}
		return nil
	})
	return r
}

// gaugeIs waits until the gauge g shows want.
func gaugeIs(t *testing.T, name string, g interface{ Write(*dto.Metric) error }, want int) {
	t.Helper()
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if got := gaugeValue(g); got != want {
			return fmt.Errorf("%s = %d, want %d", name, got, want)
		}
		return nil
	})
}

func gaugeValue(g interface{ Write(*dto.Metric) error }) int {
	var m dto.Metric
	g.Write(&m)
	return int(m.GetGauge().GetValue())
}
