package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Upstream is an HTTP/2 upstream without TLS written frame by frame: it
// counts each request it receives whole and answers the first as refuse
// says — a reset of its stream or a GOAWAY — and any later one 200.
type h2Upstream struct {
	ln    net.Listener
	tls   bool
	calls atomic.Int64
}

func newH2Upstream(t *testing.T, tlsConfig *tls.Config, refuse func(fr *http2.Framer, stream uint32)) *h2Upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
	}
	u := &h2Upstream{ln: ln, tls: tlsConfig != nil}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go u.serve(c, refuse)
		}
	}()
	return u
}

func (u *h2Upstream) url(t *testing.T) *url.URL {
	if u.tls {
		return &url.URL{Scheme: "https", Host: u.ln.Addr().String()}
	}
	return &url.URL{Scheme: "http", Host: u.ln.Addr().String()}
}

func (u *h2Upstream) serve(c net.Conn, refuse func(fr *http2.Framer, stream uint32)) {
	defer c.Close()
	br := bufio.NewReader(c)
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(br, preface); err != nil {
		return
	}
	fr := http2.NewFramer(c, br)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if fr.WriteSettings() != nil {
		return
	}
	answer := func(stream uint32) {
		if u.calls.Add(1) == 1 {
			refuse(fr, stream)
			return
		}
		var hb bytes.Buffer
		hpack.NewEncoder(&hb).WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: true})
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				answer(f.StreamID)
			}
		case *http2.DataFrame:
			if f.StreamEnded() {
				answer(f.StreamID)
			}
		}
	}
}

// A keyed request sent upstream over HTTP/2 is never sent again by the
// transport: Go's HTTP/2 transport resends a request, rewinding its body,
// when its stream is reset with PROTOCOL_ERROR — after the upstream may
// have acted on it — or refused, or left out by a GOAWAY. The upstream
// here acted on the first; the proxy must answer 502 and leave it at one.
func TestKeyedRequestIsNeverResentOverHTTP2(t *testing.T) {
	refusals := map[string]func(fr *http2.Framer, stream uint32){
		"stream reset with PROTOCOL_ERROR": func(fr *http2.Framer, stream uint32) {
			fr.WriteRSTStream(stream, http2.ErrCodeProtocol)
		},
		"stream refused": func(fr *http2.Framer, stream uint32) {
			fr.WriteRSTStream(stream, http2.ErrCodeRefusedStream)
		},
		"GOAWAY before the stream": func(fr *http2.Framer, stream uint32) {
			fr.WriteGoAway(0, http2.ErrCodeNo, nil)
		},
	}
	// A certificate for the TLS upstream, and a transport that trusts it.
	cert := httptest.NewUnstartedServer(nil)
	cert.StartTLS()
	serverTLS := &tls.Config{Certificates: cert.TLS.Certificates, NextProtos: []string{"h2"}}
	roots := x509.NewCertPool()
	roots.AddCert(cert.Certificate())
	cert.Close()
	for _, p := range []UpstreamProtocol{UpstreamH2C, UpstreamAuto} {
		for name, refuse := range refusals {
			for _, body := range []string{`{"amount":1}`, ""} {
				t.Run(p.String()+"/"+name+"/body "+body, func(t *testing.T) {
					var up *h2Upstream
					tr := NewTransportFor(p)
					if p == UpstreamAuto {
						up = newH2Upstream(t, serverTLS, refuse)
						tr.TLSClientConfig = &tls.Config{RootCAs: roots}
					} else {
						up = newH2Upstream(t, nil, refuse)
					}
					e := newEnv(t, func(http.ResponseWriter, *http.Request) {}, func(o *Options) {
						o.Upstream, o.UpstreamProtocol, o.Transport = up.url(t), p, tr
					})
					r := e.do(t, http.MethodPost, "/x", "k", body)
					if got := up.calls.Load(); got != 1 {
						t.Fatalf("upstream received the keyed request %d times, want 1: the transport resent it", got)
					}
					if r.StatusCode != http.StatusBadGateway {
						t.Fatalf("got %d %s, want 502", r.StatusCode, r.body)
					}
				})
			}
		}
	}
}
