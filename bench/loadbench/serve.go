//go:build linux

package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/http/pprof"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/proxy"
)

// upstreamBody is what the benchmark's upstream answers to every POST: a
// typical small JSON API response of about 200 bytes.
var upstreamBody = []byte(`{"id":"ch_3PqL8e2eZvKYlo2C1xkQ9s7b","object":"charge","amount":2000,` +
	`"currency":"eur","status":"succeeded","captured":true,"description":"load benchmark charge",` +
	`"created":1718000000,"livemode":false}` + "\n")

// serveUpstream runs the benchmark's upstream until SIGTERM or SIGKILL.
func serveUpstream(addr string) error {
	return serve(addr, &http.Server{Handler: constantHandler(false), ReadHeaderTimeout: 10 * time.Second})
}

// constantHandler reads each request's body and answers upstreamBody,
// marked as a replay when replayed is set. A request whose query says
// bytes=N gets a body of N bytes instead (see bodyOfSize).
func constantHandler(replayed bool) http.Handler {
	contentLength := strconv.Itoa(len(upstreamBody))
	var sized sync.Map // N → []byte
	mux := newMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		body, length := upstreamBody, contentLength
		if q := r.URL.Query().Get("bytes"); q != "" {
			n, err := strconv.Atoi(q)
			if err != nil || n < minSizedBody || n > maxSizedBody {
				http.Error(w, "bytes: want an integer from 16 to 16 MiB", http.StatusBadRequest)
				return
			}
			b, ok := sized.Load(n)
			if !ok {
				b, _ = sized.LoadOrStore(n, bodyOfSize(n))
			}
			body, length = b.([]byte), q
		}
		h := w.Header()
		h["Content-Type"] = []string{"application/json"}
		h["Content-Length"] = []string{length}
		if replayed {
			h["Idempotent-Replayed"] = []string{"true"}
		}
		_, _ = w.Write(body)
	})
	return mux
}

// The bounds of a body size a request may ask for.
const (
	minSizedBody = 16
	maxSizedBody = 16 << 20
)

// bodyOfSize returns a JSON document of exactly n bytes (n ≥ minSizedBody),
// one string field padded to length.
func bodyOfSize(n int) []byte {
	const open, close = `{"pad":"`, "\"}\n"
	b := make([]byte, 0, n)
	b = append(b, open...)
	for len(b) < n-len(close) {
		b = append(b, 'x')
	}
	return append(b, close...)
}

// newMux returns a mux with the endpoints every child started from this
// program answers: /ready; /gomaxprocs, which reports the GOMAXPROCS the
// child runs with, so the report states what was, not what was asked; and
// /debug/pprof/profile, so that --profile can set the floor's and the plain
// proxy's CPU profiles beside the proxies'.
func newMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ready", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /gomaxprocs", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, strconv.Itoa(runtime.GOMAXPROCS(0)))
	})
	return mux
}

// servePlain runs the baseline, the floor every ratio is measured against:
// a stock httputil.ReverseProxy tuned as an operator would tune one — the
// product's own Transport, a BufferPool — behind a stock http.Server. Nothing
// the product needs on some path is here (full duplex, server timeouts, header
// rewriting): those are the product's cost and show in its own rows. A
// product row that beats this one on no-key traffic, which it forwards with
// strictly more work, means the baseline is not the floor (see baselineSuspect).
func servePlain(addr, upstream string) error {
	u, err := url.Parse(upstream)
	if err != nil {
		return err
	}
	mux := newMux()
	mux.Handle("/", plainProxy(u))
	return serve(addr, plainServer(mux))
}

// plainProxy is the baseline's reverse proxy: SetURL, the client's Host and
// X-Forwarded-*, the product's transport settings, pooled copy buffers.
func plainProxy(upstream *url.URL) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
		},
		Transport:  proxy.NewTransport(),
		BufferPool: plainBuffers{},
	}
}

// plainServer is a stock http.Server: no timeouts, each of which would set a
// deadline per request the floor has no business paying.
func plainServer(h http.Handler) *http.Server { return &http.Server{Handler: h} }

// plainBuffers is the BufferPool an operator gives a ReverseProxy: 32 KiB
// copy buffers, the size ReverseProxy allocates without one.
type plainBuffers struct{}

var plainCopyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (plainBuffers) Get() []byte  { return *plainCopyBuffers.Get().(*[]byte) }
func (plainBuffers) Put(b []byte) { plainCopyBuffers.Put(&b) }

// productServer has the product's server timeouts
// (cmd/idempotency-proxy/serve.go): the replay floor pays what the
// product's server pays per request.
func productServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
}

// serve runs srv on addr until SIGTERM.
func serve(addr string, srv *http.Server) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// serveFloor runs the replay floor: the product's server, timeouts and all,
// with a handler that does nothing but what any replay must — read the
// request body, write a recorded-looking response. The distance from a
// memory-store replay to it is the cost of the idempotency work; its own
// ratio to the plain proxy bounds what any replay in a net/http server can
// reach on the machine.
func serveFloor(addr string) error {
	return serve(addr, productServer(constantHandler(true)))
}
