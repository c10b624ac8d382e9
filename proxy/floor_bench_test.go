package proxy

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"testing"
)

// BenchmarkReverseProxyFloor forwards BenchmarkHandlerNoKey's request
// through a stock httputil.ReverseProxy on the same in-process upstream:
// what the handler's no-key path costs above it is the handler's own.
func BenchmarkReverseProxyFloor(b *testing.B) {
	rig := newBenchRig(b)
	delete(rig.r.Header, "Idempotency-Key")
	u := &url.URL{Scheme: "http", Host: "upstream.invalid"}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
		},
		Transport:  fixedUpstream{contentLength: strconv.Itoa(len(benchResponseBody))},
		BufferPool: bufferPool{},
	}
	b.ReportAllocs()
	for b.Loop() {
		rig.body.Reset(benchRequestBody)
		rig.r.ContentLength = int64(len(benchRequestBody))
		rig.w.reset()
		rp.ServeHTTP(rig.w, rig.r)
		if rig.w.status != http.StatusOK {
			b.Fatalf("status %d, want 200", rig.w.status)
		}
	}
}
