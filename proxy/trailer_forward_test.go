package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// The upstream receives the request the client sent, trailers included,
// whether the proxy forwards it under a lease or, with the store down and
// the route failing open, without one. The proxy holds the body in memory
// and would otherwise send it with a length, which has no room for
// trailers.
func TestRequestTrailersReachTheUpstream(t *testing.T) {
	for _, storeDown := range []bool{false, true} {
		for _, body := range []string{"", `{"amount":100}`} {
			name := "lease/" + map[bool]string{true: "empty body", false: "body"}[body == ""]
			if storeDown {
				name = "store down, fail open/" + strings.TrimPrefix(name, "lease/")
			}
			t.Run(name, func(t *testing.T) {
				var gotBody, gotTrailer string
				st := newFlaky(t)
				e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
					b, _ := io.ReadAll(r.Body)
					gotBody, gotTrailer = string(b), r.Trailer.Get("X-Amount")
					w.Write([]byte("ok"))
				}, withStore(st), withPolicy(func(p *Policy) { p.OnStoreError = FailOpen }))
				st.down.Store(storeDown)
				pr, pw := io.Pipe()
				go func() { pw.Write([]byte(body)); pw.Close() }()
				req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/x", pr) // chunked
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Idempotency-Key", "k")
				req.Trailer = http.Header{"X-Amount": {"100"}}
				res, err := e.srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					t.Fatalf("status %d, want 200", res.StatusCode)
				}
				if gotBody != body || gotTrailer != "100" {
					t.Fatalf("upstream got body %q, trailer X-Amount %q; want %q and 100", gotBody, gotTrailer, body)
				}
			})
		}
	}
}

// A request that reached the proxy without chunked framing of its own (over
// HTTP/2, say) still goes upstream chunked when it has trailers, even with
// an empty body, which the transport would otherwise probe and send as no
// body at all.
func TestTrailersGoChunkedWithoutFramingOfTheirOwn(t *testing.T) {
	var gotTrailer string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		gotTrailer = r.Trailer.Get("X-Amount")
	}))
	defer up.Close()
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		for _, body := range []string{"", "{}"} {
			gotTrailer = ""
			req, err := http.NewRequest(method, up.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Trailer = http.Header{"X-Amount": {"100"}}
			setBody(req, []byte(body), nil)
			res, err := up.Client().Transport.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if gotTrailer != "100" {
				t.Errorf("%s with body %q: upstream got trailer X-Amount %q, want 100", method, body, gotTrailer)
			}
		}
	}
}

// Over HTTP/2 to the upstream, where no chunked framing hides a length, a
// request with trailers goes without a declared length, and its body and
// trailers arrive whole.
func TestRequestTrailersReachAnHTTP2Upstream(t *testing.T) {
	var gotBody, gotTrailer string
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		gotBody, gotTrailer = string(b), r.Trailer.Get("X-Amount")
		w.Write([]byte("ok"))
	}))
	up.Config.Protocols = new(http.Protocols)
	up.Config.Protocols.SetUnencryptedHTTP2(true)
	up.Start()
	t.Cleanup(up.Close)
	u, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, nil, func(o *Options) { o.Upstream, o.UpstreamProtocol = u, UpstreamH2C })
	for _, body := range []string{"", `{"amount":100}`} {
		gotBody, gotTrailer = "", ""
		pr, pw := io.Pipe()
		go func() { pw.Write([]byte(body)); pw.Close() }()
		req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/x", pr) // chunked
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", "k"+body)
		req.Trailer = http.Header{"X-Amount": {"100"}}
		res, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || gotBody != body || gotTrailer != "100" {
			t.Fatalf("body %q: status %d, upstream got body %q, trailer X-Amount %q; want 200, %q and 100", body, res.StatusCode, gotBody, gotTrailer, body)
		}
	}
}
