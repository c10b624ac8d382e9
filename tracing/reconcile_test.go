package tracing

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idempotency-proxy/idempotency-proxy/proxy"
)

// Each lookup of an unknown outcome is a client span of its own, under
// the request whose answer was lost; the marker beside the key is read
// through the traced store.
func TestEachLookupIsAClientSpanUnderTheRequest(t *testing.T) {
	var lookups atomic.Int64
	up := upstreamURL(t, func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		if r.Method == http.MethodPost {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close() // committed, then died
			}
			return
		}
		if lookups.Add(1) == 1 {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte(`{"id":"ch_1"}`))
	})
	rg := newReconcilingRig(t, up, "GET /v1/charges?idempotency_key={key}")
	if r := rg.do(t, "/v1/charges", "k"); r.StatusCode != http.StatusOK || r.body != `{"id":"ch_1"}` {
		t.Fatalf("got %d %s, want the looked-up charge", r.StatusCode, r.body)
	}
	spans := rg.sink.waitFor(t, "the lookups", func(s []sdktrace.ReadOnlySpan) bool {
		return len(serverSpans(s)) == 1 && len(named(children(s, serverSpans(s)[0]), "GET")) == 2
	})
	if post := named(children(spans, serverSpans(spans)[0]), "POST"); len(post) != 1 {
		t.Errorf("want the failed POST beside the lookups:%s", describe(spans))
	}
}

// A lookup's target may hold the key, a header's value or a body's
// (reconcile.request's placeholders) in its path as well as its query:
// its span names the upstream without any of them, as every span does.
func TestLookupSpanCarriesNoValueFilledIntoItsTarget(t *testing.T) {
	const key, order = "sk_key_secret_value", "ord_body_secret_value"
	up := upstreamURL(t, func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		if r.Method == http.MethodPost {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close() // committed, then died
			}
			return
		}
		w.Write([]byte(`{"id":"ch_1"}`))
	})
	rg := newReconcilingRig(t, up, "GET /v1/charges/{key}/{header:X-Order}?order={header:X-Order}")
	if r := rg.do(t, "/v1/charges", key, "X-Order", order); r.StatusCode != http.StatusOK {
		t.Fatalf("got %d %s, want the looked-up charge", r.StatusCode, r.body)
	}
	spans := rg.sink.waitFor(t, "the lookup", func(s []sdktrace.ReadOnlySpan) bool {
		return len(serverSpans(s)) == 1 && len(named(children(s, serverSpans(s)[0]), "GET")) == 1
	})
	lookup := named(children(spans, serverSpans(spans)[0]), "GET")[0]
	if v, ok := attr(lookup, "url.full"); !ok || !strings.HasSuffix(v.AsString(), "/v1/charges/{key}/{header:X-Order}") {
		t.Errorf("lookup's url.full %q, want the upstream and the template's path:%s", v.Emit(), describe(spans))
	}
	for _, sp := range spans {
		for _, kv := range sp.Attributes() {
			if v := kv.Value.Emit(); strings.Contains(v, key) || strings.Contains(v, order) {
				t.Errorf("span %s attribute %s = %q carries a value filled into the lookup", sp.Name(), kv.Key, v)
			}
		}
	}
}

// newReconcilingRig is a rig whose routes settle unknown outcomes
// (on_upstream_error: reconcile) by the lookup request, asked at once and
// every 200ms after.
func newReconcilingRig(t *testing.T, up *url.URL, request string) *rig {
	t.Helper()
	reconcile := func(p *proxy.Policy) {
		p.OnUpstreamError = proxy.UpstreamErrorReconcile
		p.Reconcile.Request = request
		p.Reconcile.After, p.Reconcile.Every = time.Millisecond, 200*time.Millisecond
	}
	return newRig(t, up, func(o *proxy.Options) {
		reconcile(&o.Default)
		for i := range o.Routes {
			reconcile(&o.Routes[i].Policy)
		}
	})
}
