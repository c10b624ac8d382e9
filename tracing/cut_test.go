package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idempotency-proxy/idempotency-proxy/proxy"
)

// upstreamSpan waits for the client span of the one upstream call.
func upstreamSpan(t *testing.T, rg *rig) sdktrace.ReadOnlySpan {
	t.Helper()
	spans := rg.sink.waitFor(t, "the upstream call's span", func(s []sdktrace.ReadOnlySpan) bool {
		for _, sp := range s {
			if sp.SpanKind() == trace.SpanKindClient {
				return true
			}
		}
		return false
	})
	for _, sp := range spans {
		if sp.SpanKind() == trace.SpanKindClient {
			return sp
		}
	}
	return nil
}

// An upstream call the proxy cuts at upstream.max_execution timed out, and
// its span says so, over HTTP/1.1, whose transport fails with the cut, as
// over HTTP/2, whose transport fails with context.Canceled.
func TestCallCutAtMaxExecutionIsATimeoutInItsSpan(t *testing.T) {
	for _, protocol := range []proxy.UpstreamProtocol{proxy.UpstreamHTTP1, proxy.UpstreamH2C} {
		t.Run(protocol.String(), func(t *testing.T) {
			proto := make(chan int, 1)
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				proto <- r.ProtoMajor
				io.Copy(io.Discard, r.Body) // then the server sees the call cut
				<-r.Context().Done()        // no answer: the call runs until it is cut
			}))
			srv.Config.Protocols = new(http.Protocols)
			srv.Config.Protocols.SetHTTP1(true)
			srv.Config.Protocols.SetUnencryptedHTTP2(true)
			srv.Start()
			t.Cleanup(srv.Close)
			up, err := url.Parse(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			// The client's wait passes first, then max_execution: the
			// call is cut detached from its client, however slow the
			// machine.
			rg := newRig(t, up, func(o *proxy.Options) {
				o.UpstreamTimeout, o.MaxExecution = 10*time.Millisecond, 20*time.Millisecond
				o.UpstreamProtocol = protocol
				o.Transport.(*transport).next = proxy.NewTransportFor(protocol)
			})
			if r := rg.do(t, "/v1/charges", "k"); r.StatusCode != http.StatusGatewayTimeout {
				t.Fatalf("got %d %s, want 504: the client's wait passed", r.StatusCode, r.body)
			}
			sp := upstreamSpan(t, rg)
			if got, want := <-proto, map[proxy.UpstreamProtocol]int{proxy.UpstreamHTTP1: 1, proxy.UpstreamH2C: 2}[protocol]; got != want {
				t.Fatalf("the upstream was called over HTTP/%d, want HTTP/%d", got, want)
			}
			if got, _ := attr(sp, semconv.ErrorTypeKey); got.AsString() != "timeout" {
				t.Errorf("error.type %q, want timeout:%s", got.Emit(), describe([]sdktrace.ReadOnlySpan{sp}))
			}
		})
	}
}

// An upstream call whose client went away, not cut by the proxy, did not
// time out: its span does not say timeout.
func TestCallItsClientLeftIsNoTimeoutInItsSpan(t *testing.T) {
	arrived := make(chan struct{})
	up := upstreamURL(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		close(arrived)
		<-r.Context().Done()
	})
	rg := newRig(t, up)
	ctx, cancel := context.WithCancel(context.Background())
	// Without a key the call is the client's: it ends when the client
	// goes away.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rg.proxy.URL+"/v1/charges", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	gone := make(chan error, 1)
	go func() {
		res, err := rg.proxy.Client().Do(req)
		if err == nil {
			res.Body.Close()
		}
		gone <- err
	}()
	<-arrived
	cancel()
	if err := <-gone; err == nil {
		t.Fatal("the client's request succeeded after it went away")
	}
	sp := upstreamSpan(t, rg)
	if got, _ := attr(sp, semconv.ErrorTypeKey); got.AsString() != "_OTHER" {
		t.Errorf("error.type %q, want _OTHER:%s", got.Emit(), describe([]sdktrace.ReadOnlySpan{sp}))
	}
}
