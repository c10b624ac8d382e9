package tracing

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The proxy tells "never sent" from "maybe sent" by an httptrace hook in
// the upstream request's context; the traced transport must keep it. An
// upstream that hangs up after reading the request may have acted on it:
// under on_upstream_error keep, the 502 is recorded and replayed, and the
// upstream is called once.
func TestTracedTransportKeepsSentDetection(t *testing.T) {
	var calls atomic.Int64
	up := upstreamURL(t, func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		calls.Add(1)
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	})
	rg := newRig(t, up, keepOnUpstreamError)
	first := rg.do(t, "/v1/charges", "k")
	if first.StatusCode != http.StatusBadGateway {
		t.Fatalf("first: %d %s, want 502", first.StatusCode, first.body)
	}
	retry := rg.do(t, "/v1/charges", "k")
	if retry.StatusCode != http.StatusBadGateway || !retry.replayed() || calls.Load() != 1 {
		t.Fatalf("retry: %d replayed=%v after %d executions, want the recorded 502 and one execution (at-most-once)",
			retry.StatusCode, retry.replayed(), calls.Load())
	}
	spans := rg.sink.waitFor(t, "both requests", func(s []sdktrace.ReadOnlySpan) bool { return len(serverSpans(s)) == 2 })
	client := named(children(spans, serverSpans(spans)[0]), "POST")
	if len(client) != 1 || client[0].Status().Code.String() != "Error" {
		t.Errorf("want one failed upstream span under the first request:%s", describe(spans))
	}
}

// A dial failure proves nothing was sent: the key is released and a retry
// executes, with tracing on as without.
func TestTracedTransportKeepsNeverSentDetection(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := &url.URL{Scheme: "http", Host: l.Addr().String()}
	l.Close()
	rg := newRig(t, dead, keepOnUpstreamError)
	for i := range 2 {
		r := rg.do(t, "/v1/charges", "k")
		if r.StatusCode != http.StatusBadGateway || r.replayed() {
			t.Fatalf("request %d: %d replayed=%v, want a fresh 502 (the key released, nothing recorded)", i, r.StatusCode, r.replayed())
		}
	}
	spans := rg.sink.waitFor(t, "both requests", func(s []sdktrace.ReadOnlySpan) bool { return len(serverSpans(s)) == 2 })
	for _, srv := range serverSpans(spans) {
		if got := named(children(spans, srv), SpanStoreRelease); len(got) != 1 {
			t.Errorf("want a release span under each request:%s", describe(spans))
		}
	}
}

// Responses stream through the traced handler: the client reads the first
// chunk while the upstream is still writing.
func TestTracedHandlerStreams(t *testing.T) {
	release := make(chan struct{})
	up := upstreamURL(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("first chunk\n"))
		http.NewResponseController(w).Flush()
		<-release
		w.Write([]byte("second chunk\n"))
	})
	rg := newRig(t, up)
	// Runs before the servers close, which wait for the upstream handler.
	t.Cleanup(func() { close(release) })
	// Without streaming the first chunk never comes: the deadline turns
	// that hang into a failure.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rg.proxy.URL+"/v1/charges", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", "k")
	res, err := rg.proxy.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	line, err := bufio.NewReader(res.Body).ReadString('\n')
	if err != nil || line != "first chunk\n" {
		t.Fatalf("first line = %q, %v", line, err)
	}
}

// A protocol upgrade passes through: the traced writer hijacks, and the
// upgraded connection (the 101's body) reaches the reverse proxy intact.
func TestTracedHandlerPassesUpgrades(t *testing.T) {
	up := upstreamURL(t, func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		line, _ := brw.ReadString('\n')
		brw.WriteString("echo: " + line)
		brw.Flush()
	})
	rg := newRig(t, up)
	conn, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", strings.TrimPrefix(rg.proxy.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: proxy\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v, want 101", res, err)
	}
	io.WriteString(conn, "hello\n")
	if line, err := br.ReadString('\n'); line != "echo: hello\n" {
		t.Fatalf("over the upgraded connection: %q, %v", line, err)
	}
	conn.Close()
	spans := rg.sink.waitFor(t, "the upgrade's server span", func(s []sdktrace.ReadOnlySpan) bool { return len(serverSpans(s)) == 1 })
	if got := named(spans, "GET"); len(got) != 2 || got[0].SpanKind() != trace.SpanKindClient {
		t.Errorf("want a client and a server span GET:%s", describe(spans))
	}
}
