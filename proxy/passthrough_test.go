package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// TestLargeResponsesToStreamedPassThroughRequestsArriveWhole sends requests
// the proxy passes through — without a key, and with a method it does not
// protect — with their body streamed, to an upstream that answers with a
// large response before it has read that body. The whole response must
// reach the client. Without full duplex, net/http's server drains and
// closes the request body once the response starts, while the transport is
// still reading it to send it upstream; the transport then fails and drops
// the upstream connection in the middle of the response (golang/go#40747).
func TestLargeResponsesToStreamedPassThroughRequestsArriveWhole(t *testing.T) {
	// A body under the 256 KiB the server drains once the response starts,
	// sent in small writes so that the transport is still reading it then.
	const reqSize, respSize, attempts = 192 << 10, 1 << 20, 20
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			t.Errorf("upstream: EnableFullDuplex: %v", err)
		}
		// Answer in full after the first byte of the body: the proxy's
		// transport is then still sending it when the response passes
		// through.
		io.ReadFull(r.Body, make([]byte, 1))
		w.Header().Set("Content-Length", itoa(respSize))
		w.Write(bytes.Repeat([]byte("r"), respSize))
		io.Copy(io.Discard, r.Body)
	}))
	srv := passThroughServer(t, up)

	for _, method := range []string{http.MethodPost, "REPORT"} { // no key; not protected
		for range attempts {
			pr, pw := io.Pipe()
			go func() {
				chunk := bytes.Repeat([]byte("q"), 4<<10)
				for range reqSize / len(chunk) {
					if _, err := pw.Write(chunk); err != nil {
						return // the request failed; the response says how
					}
				}
				pw.Close()
			}()
			req, err := http.NewRequest(method, srv.URL+"/upload", pr)
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = reqSize
			resp, err := srv.Client().Do(req)
			if err != nil {
				pr.CloseWithError(err)
				t.Fatalf("%s: %v", method, err)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			pr.Close()
			if err != nil || n != respSize {
				t.Fatalf("%s: response body of %d bytes of %d, error %v: cut off", method, n, respSize, err)
			}
		}
	}
}

// A request passed through may get its response while it is still sending
// its body: a client that sends the rest of its body only once the response
// has started (a streaming exchange over HTTP/1.1) gets both through. The
// response starts while the body is still on its way only with full
// duplex: otherwise the proxy's server first reads the rest of the body,
// which this client withholds until the response starts.
func TestPassedThroughResponseStartsWhileTheRequestIsStillSent(t *testing.T) {
	const head = 64 << 10 // over the proxy's response buffer: it is sent on
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			t.Errorf("upstream: EnableFullDuplex: %v", err)
		}
		io.ReadFull(r.Body, make([]byte, 1))
		w.Write(bytes.Repeat([]byte("r"), head))
		w.(http.Flusher).Flush()
		rest, _ := io.ReadAll(r.Body)
		w.Write([]byte("|" + itoa(int64(1+len(rest)))))
	}))
	srv := passThroughServer(t, up)

	for _, method := range []string{http.MethodPost, "REPORT"} { // no key; not protected
		pr, pw := io.Pipe()
		started := make(chan struct{})
		go func() {
			if _, err := pw.Write([]byte("q")); err != nil {
				return
			}
			select {
			case <-started:
			case <-time.After(10 * time.Second):
				pw.CloseWithError(errors.New("the response did not start before the request's body was all sent"))
				return
			}
			pw.Write(bytes.Repeat([]byte("q"), 1<<10))
			pw.Close()
		}()
		req, err := http.NewRequest(method, srv.URL+"/stream", pr)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		close(started)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := strings.Repeat("r", head) + "|1025"; err != nil || string(b) != want {
			t.Fatalf("%s: response of %d bytes ending %q, error %v; want %d bytes ending |1025", method, len(b), b[max(0, len(b)-8):], err, len(want))
		}
	}
}

// serverWriter skips only the proxy's own writers, and those answer no
// ResponseController request but through Unwrap: skipping them changes
// no answer a pass-through gets.
func TestServerWriterSkipsOnlyWritersThatPassControlThrough(t *testing.T) {
	for name, w := range map[string]http.ResponseWriter{"counted": new(counted), "unrecorded": new(unrecorded)} {
		if _, ok := w.(interface{ EnableFullDuplex() error }); ok {
			t.Errorf("%s enables full duplex itself", name)
		}
		if _, ok := w.(interface{ SetReadDeadline(time.Time) error }); ok {
			t.Errorf("%s sets read deadlines itself", name)
		}
	}
	server := httptest.NewRecorder()
	logged := (&request{}).counting(server)
	if got := serverWriter((&request{}).unrecorded(logged)); got != server {
		t.Fatalf("serverWriter = %T, want the server's writer", got)
	}
}

// passThroughServer serves a handler with the memory store in front of up,
// both closed with the test.
func passThroughServer(t *testing.T, up *httptest.Server) *httptest.Server {
	t.Helper()
	t.Cleanup(up.Close)
	u, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	h, err := New(Options{Upstream: u, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
