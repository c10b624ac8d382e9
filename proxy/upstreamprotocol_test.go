package proxy

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// upstream.protocol chooses what the transport speaks: HTTP/1.1, h2c
// with prior knowledge to an http upstream, and HTTP/2 over TLS where an
// https upstream offers it (auto).
func TestUpstreamProtocolChoosesTheTransportsHTTPVersion(t *testing.T) {
	proto := func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(r.Proto)) }
	plain := httptest.NewUnstartedServer(http.HandlerFunc(proto))
	plain.Config.Protocols = new(http.Protocols)
	plain.Config.Protocols.SetHTTP1(true)
	plain.Config.Protocols.SetUnencryptedHTTP2(true)
	plain.Start()
	t.Cleanup(plain.Close)
	tlsSrv := httptest.NewUnstartedServer(http.HandlerFunc(proto))
	tlsSrv.EnableHTTP2 = true
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)

	for _, tt := range []struct {
		p    UpstreamProtocol
		srv  *httptest.Server
		want string
	}{
		{UpstreamHTTP1, plain, "HTTP/1.1"},
		{UpstreamH2C, plain, "HTTP/2.0"},
		{UpstreamAuto, plain, "HTTP/1.1"},
		{UpstreamHTTP1, tlsSrv, "HTTP/1.1"},
		{UpstreamAuto, tlsSrv, "HTTP/2.0"},
		{UpstreamH2C, tlsSrv, "HTTP/2.0"},
	} {
		tr := NewTransportFor(tt.p)
		tr.TLSClientConfig = &tls.Config{RootCAs: tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
		res, err := (&http.Client{Transport: tr}).Get(tt.srv.URL)
		if err != nil {
			t.Fatalf("%s to %s: %v", tt.p, tt.srv.URL, err)
		}
		b := make([]byte, 16)
		n, _ := res.Body.Read(b)
		res.Body.Close()
		tr.CloseIdleConnections()
		if got := string(b[:n]); got != tt.want {
			t.Errorf("upstream.protocol %s to %s: upstream saw %s, want %s", tt.p, strings.SplitN(tt.srv.URL, ":", 2)[0], got, tt.want)
		}
	}
}
