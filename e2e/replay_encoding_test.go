package e2e

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
)

// TestReplayIsInAnEncodingItsClientAccepts runs the built binary in front
// of an upstream that gzips its answer when the request accepts gzip, as
// servers do. The first client accepts gzip (curl --compressed) and gets
// the gzipped answer, which is recorded as sent; a retry from a client
// that sends no Accept-Encoding (curl without --compressed) gets the
// replay decoded, with its length and without Content-Encoding; a retry
// accepting gzip gets the recorded bytes. Through the memory store and a
// real redis-server, which keep the gzip bytes as they are.
func TestReplayIsInAnEncodingItsClientAccepts(t *testing.T) {
	plain := strings.Repeat(`{"order":"42","state":"paid"}`, 50)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	io.WriteString(zw, plain)
	zw.Close()
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			var execs atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				execs.Add(1)
				body := []byte(plain)
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Vary", "Accept-Encoding")
				if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
					w.Header().Set("Content-Encoding", "gzip")
					body = gz.Bytes()
				}
				w.Header().Set("Content-Length", strconv.Itoa(len(body)))
				w.WriteHeader(http.StatusCreated)
				w.Write(body)
			}))
			t.Cleanup(up.Close)
			cfg := proxyConfig{Upstream: up.URL, UpstreamTimeout: 10 * time.Second, Memory: kind == "memory"}
			if kind == "redis" {
				cfg.RedisURL = redistest.Start(t).URL()
			}
			p := startProxy(t, "acceptenc-"+kind, cfg)
			c := newClient(t, 15*time.Second) // sends no Accept-Encoding of its own, decodes nothing

			first := mustSend(t, c, p.URL(), request{Key: "order-42", Body: `{"order":"42"}`, Header: map[string]string{"Accept-Encoding": "gzip"}})
			if first.Status != http.StatusCreated || first.Header.Get("Content-Encoding") != "gzip" || first.Body != gz.String() {
				t.Fatalf("first: %s Content-Encoding %q, want the upstream's gzipped 201", first, first.Header.Get("Content-Encoding"))
			}
			plainRetry := mustSend(t, c, p.URL(), request{Key: "order-42", Body: `{"order":"42"}`})
			if !plainRetry.Replayed() || plainRetry.Body != plain {
				t.Fatalf("retry without Accept-Encoding: %s %q, want the replay decoded", plainRetry, plainRetry.Body)
			}
			if ce, cl := plainRetry.Header.Get("Content-Encoding"), plainRetry.Header.Get("Content-Length"); ce != "" || cl != strconv.Itoa(len(plain)) {
				t.Errorf("retry without Accept-Encoding: Content-Encoding %q, Content-Length %q; want none and %d", ce, cl, len(plain))
			}
			if v := plainRetry.Header.Get("Vary"); v != "Accept-Encoding" {
				t.Errorf("retry without Accept-Encoding: Vary %q, want the upstream's Accept-Encoding", v)
			}
			gzRetry := mustSend(t, c, p.URL(), request{Key: "order-42", Body: `{"order":"42"}`, Header: map[string]string{"Accept-Encoding": "gzip, deflate"}})
			if !gzRetry.Replayed() || gzRetry.Header.Get("Content-Encoding") != "gzip" || gzRetry.Body != gz.String() {
				t.Fatalf("retry accepting gzip: %s Content-Encoding %q, want the recorded gzip bytes", gzRetry, gzRetry.Header.Get("Content-Encoding"))
			}
			if got := execs.Load(); got != 1 {
				t.Errorf("upstream executed %d times, want 1", got)
			}
		})
	}
}
