package proxy

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// An HTTP/2 upstream whose answer Go's HTTP/2 transport cannot read — its
// status missing or not a number, a field name or value HTTP/2 forbids,
// pseudo-header fields out of place — has executed the request: it
// answered on the request's stream. As for an HTTP/1.x answer that cannot
// be read (TestMalformedAnswerIsNotExecutedTwice), its 502 is recorded
// whatever on_upstream_error says, and a retry replays it.
func TestMalformedHTTP2AnswerIsNotExecutedTwice(t *testing.T) {
	for name, fields := range map[string][]hpack.HeaderField{
		"no status":                    {{Name: "x-ref", Value: "a"}},
		"status not a number":          {{Name: ":status", Value: "2x1"}},
		"upper-case field name":        {{Name: ":status", Value: "201"}, {Name: "X-Ref", Value: "a"}},
		"control byte in a value":      {{Name: ":status", Value: "201"}, {Name: "x-ref", Value: "a\x01b"}},
		"status after a regular field": {{Name: "x-ref", Value: "a"}, {Name: ":status", Value: "201"}},
		"unknown pseudo-header field":  {{Name: ":status", Value: "201"}, {Name: ":ref", Value: "a"}},
		"two statuses":                 {{Name: ":status", Value: "201"}, {Name: ":status", Value: "201"}},
		"request and response pseudos": {{Name: ":status", Value: "201"}, {Name: ":path", Value: "/"}},
	} {
		t.Run(name, func(t *testing.T) {
			up := newH2Upstream(t, nil, func(fr *http2.Framer, stream uint32) {
				var hb bytes.Buffer
				enc := hpack.NewEncoder(&hb)
				for _, f := range fields {
					enc.WriteField(f)
				}
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: true})
			})
			e := newEnv(t, nil, func(o *Options) {
				o.Upstream, o.UpstreamProtocol, o.Transport = up.url(t), UpstreamH2C, NewTransportFor(UpstreamH2C)
			})
			first := e.do(t, "POST", "/x", "k", "{}")
			if first.StatusCode != http.StatusBadGateway || first.problemType() != "upstream-failed" {
				t.Fatalf("first: %d %s, want 502 upstream-failed", first.StatusCode, first.body)
			}
			r := e.do(t, "POST", "/x", "k", "{}")
			if !r.replayed() || r.StatusCode != http.StatusBadGateway || up.calls.Load() != 1 {
				t.Fatalf("retry: %d replayed=%v after %d executions, want the recorded 502 after 1", r.StatusCode, r.replayed(), up.calls.Load())
			}
		})
	}
}

// An HTTP/2 answer whose header list is over the transport's
// MaxResponseHeaderBytes, which its SETTINGS advertised, fails after the
// upstream executed the request, as over HTTP/1.1
// (TestResponseHeaderOverTransportLimitIsNotExecutedTwice): its 502 is
// recorded, and a retry replays it.
func TestHTTP2AnswerOverTheHeaderLimitIsNotExecutedTwice(t *testing.T) {
	up := newH2Upstream(t, nil, func(fr *http2.Framer, stream uint32) {
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		enc.WriteField(hpack.HeaderField{Name: ":status", Value: "201"})
		// Indexed after its first time: a few bytes on the wire, each
		// counting its whole size toward the list.
		pad := hpack.HeaderField{Name: "x-pad", Value: strings.Repeat("h", 2<<10)}
		for range 16 {
			enc.WriteField(pad)
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: true})
	})
	tr := NewTransportFor(UpstreamH2C)
	tr.MaxResponseHeaderBytes = 16 << 10
	e := newEnv(t, nil, func(o *Options) { o.Upstream, o.UpstreamProtocol, o.Transport = up.url(t), UpstreamH2C, tr })
	first := e.do(t, "POST", "/x", "k", "{}")
	if first.StatusCode != http.StatusBadGateway || !strings.Contains(first.body, "headers are larger") {
		t.Fatalf("first: %d %s, want 502 naming the headers' size", first.StatusCode, first.body)
	}
	r := e.do(t, "POST", "/x", "k", "{}")
	if !r.replayed() || r.StatusCode != http.StatusBadGateway || up.calls.Load() != 1 {
		t.Fatalf("retry: %d replayed=%v after %d executions, want the recorded 502 after 1", r.StatusCode, r.replayed(), up.calls.Load())
	}
}
