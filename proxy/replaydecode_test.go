package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// plainBody is what the gzipping upstream answers, long enough that gzip
// shrinks it.
var plainBody = strings.Repeat(`{"charge":"ch_1","amount":100}`, 40)

// encodingUpstream answers plainBody, encoded in coding (its bytes from
// encode) when the request's Accept-Encoding names it, as servers do;
// with a strong ETag and Vary: Accept-Encoding.
func encodingUpstream(coding string, encode func(string) []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Vary", "Accept-Encoding")
		h.Set("Etag", `"ch_1-v1"`)
		h.Set("Accept-Ranges", "bytes")
		body := []byte(plainBody)
		if strings.Contains(r.Header.Get("Accept-Encoding"), coding) {
			h.Set("Content-Encoding", coding)
			body = encode(plainBody)
		}
		h.Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusCreated)
		w.Write(body)
	}
}

// doAccepting sends a keyed POST to /x whose Accept-Encoding field lines
// are acceptEncoding (none: no field), from a client that neither adds
// the field nor decodes what comes back, and returns the body as it came.
func (e *env) doAccepting(t *testing.T, key string, acceptEncoding ...string) *response {
	t.Helper()
	req, err := http.NewRequest("POST", e.srv.URL+"/x", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	req.Header["Accept-Encoding"] = acceptEncoding
	tr := e.srv.Client().Transport.(*http.Transport).Clone()
	tr.DisableCompression = true
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return &response{Response: res, body: string(b)}
}

// A record the upstream gzipped, for a first client that accepted gzip,
// is decoded when replayed to a client that sent no Accept-Encoding (curl
// without --compressed): plain bytes, their length, no Content-Encoding,
// the ETag weakened, Vary kept.
func TestGzipRecordIsReplayedPlainToAClientThatDoesNotAcceptIt(t *testing.T) {
	e := newEnv(t, encodingUpstream("gzip", func(s string) []byte { return gzipped(t, s) }))
	first := e.doAccepting(t, "k", "gzip")
	if first.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("first answer Content-Encoding %q, want the upstream's gzip", first.Header.Get("Content-Encoding"))
	}
	again := e.doAccepting(t, "k")
	if !again.replayed() || e.up.calls.Load() != 1 {
		t.Fatalf("replayed=%v executions=%d, want one execution and a replay", again.replayed(), e.up.calls.Load())
	}
	if again.body != plainBody {
		t.Fatalf("replayed body %q, want the decoded %q", again.body, plainBody)
	}
	checkHeader(t, again.Header, map[string]string{
		"Content-Encoding": "",
		"Content-Length":   strconv.Itoa(len(plainBody)),
		"Etag":             `W/"ch_1-v1"`,
		"Vary":             "Accept-Encoding",
		"Accept-Ranges":    "",
		"Content-Type":     "application/json",
	})
	if again.StatusCode != http.StatusCreated {
		t.Errorf("status %d, want the recorded 201", again.StatusCode)
	}
}

func checkHeader(t *testing.T, h http.Header, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := strings.Join(h.Values(k), ", "); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
}

// A replay's Accept-Encoding is read as RFC 9110 has it: a coding
// accepted by name or by "*" with a weight above 0 gets the recorded
// bytes; refused by q=0, not named, or only identity named, it gets them
// decoded.
func TestGzipRecordIsReplayedEncodedOnlyWhereGzipIsAccepted(t *testing.T) {
	tests := []struct {
		accept  []string
		encoded bool
	}{
		{[]string{"gzip"}, true},
		{[]string{"x-gzip"}, true},
		{[]string{"br;q=1.0, gzip;q=0.5"}, true},
		{[]string{"*"}, true},
		{[]string{"br", "gzip"}, true},
		{nil, false},
		{[]string{""}, false},
		{[]string{"gzip;q=0"}, false},
		{[]string{"*, gzip;q=0"}, false},
		{[]string{"*;q=0"}, false},
		{[]string{"identity"}, false},
		{[]string{"br, deflate"}, false},
	}
	e := newEnv(t, encodingUpstream("gzip", func(s string) []byte { return gzipped(t, s) }))
	recorded := e.doAccepting(t, "k", "gzip").body
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q", tc.accept), func(t *testing.T) {
			r := e.doAccepting(t, "k", tc.accept...)
			if !r.replayed() {
				t.Fatalf("not a replay: %d %s", r.StatusCode, r.body)
			}
			want, ce := plainBody, ""
			if tc.encoded {
				want, ce = recorded, "gzip"
			}
			if r.body != want || r.Header.Get("Content-Encoding") != ce {
				t.Fatalf("Content-Encoding %q and %d bytes, want %q and %d bytes", r.Header.Get("Content-Encoding"), len(r.body), ce, len(want))
			}
		})
	}
}

// deflate is decoded too, in the zlib format RFC 9110 names and in the
// raw form some servers send under that name.
func TestDeflateRecordIsReplayedPlainToAClientThatDoesNotAcceptIt(t *testing.T) {
	zlibbed := func(s string) []byte { return deflated(t, s) }
	raw := func(s string) []byte { z := zlibbed(s); return z[2 : len(z)-4] } // no zlib header, no checksum
	for name, encode := range map[string]func(string) []byte{"zlib": zlibbed, "raw": raw} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, encodingUpstream("deflate", encode))
			if first := e.doAccepting(t, "k", "deflate"); first.Header.Get("Content-Encoding") != "deflate" {
				t.Fatalf("first answer Content-Encoding %q, want deflate", first.Header.Get("Content-Encoding"))
			}
			again := e.doAccepting(t, "k", "gzip")
			if !again.replayed() || again.body != plainBody || again.Header.Get("Content-Encoding") != "" {
				t.Fatalf("replayed=%v Content-Encoding %q body %q, want the decoded body", again.replayed(), again.Header.Get("Content-Encoding"), again.body)
			}
		})
	}
}

// What the proxy cannot decode is replayed as recorded: a coding the
// standard library has no reader for, stacked codings, and a body that
// does not decode in the coding it names, which is logged once a period,
// never answered 500.
func TestRecordTheProxyCannotDecodeIsReplayedAsRecorded(t *testing.T) {
	tests := map[string]struct {
		coding string
		body   string
		logged bool
	}{
		"br":             {"br", "\x1b\x0f\x00\xf8\x25\x82\x02\xb1\x40", false},
		"zstd":           {"zstd", "\x28\xb5\x2f\xfd\x00\x58\x01\x00\x00", false},
		"stacked":        {"deflate, gzip", string(gzipped(t, plainBody)), false},
		"not gzip":       {"gzip", "this was never gzip", true},
		"gzip cut short": {"gzip", string(gzipped(t, plainBody)[:20]), true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var logs lockedBuffer
			e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Encoding", tc.coding)
				w.Header().Set("Etag", `"v1"`)
				w.Write([]byte(tc.body))
			}, withLog(&logs), func(o *Options) { o.AccessLog = true })
			e.doAccepting(t, "k", "br, gzip, deflate, zstd")
			for i := range 2 {
				r := e.doAccepting(t, "k")
				if !r.replayed() || r.StatusCode != http.StatusOK {
					t.Fatalf("replay %d: %d %s, want the recorded 200", i, r.StatusCode, r.body)
				}
				if r.body != tc.body || r.Header.Get("Content-Encoding") != tc.coding || r.Header.Get("Etag") != `"v1"` {
					t.Fatalf("replay %d: Content-Encoding %q, ETag %q, body %q; want the record's", i, r.Header.Get("Content-Encoding"), r.Header.Get("Etag"), r.body)
				}
			}
			// Each request's access line is its last: once three are
			// written, so is any warning.
			wait.SucceedsSoon(t, 10*time.Second, func() error {
				if n := len(logs.lines(t, "access")); n < 3 {
					return fmt.Errorf("%d access lines, want 3", n)
				}
				return nil
			})
			warned := logs.lines(t, "does not decode")
			want := 0
			if tc.logged {
				want = 1 // the second replay's is left out, counted
			}
			if len(warned) != want {
				t.Fatalf("%d warnings of a body that does not decode, want %d: %v", len(warned), want, warned)
			}
			if want == 1 && warned[0]["key_hash"] != e.keyHash(t, "k") {
				t.Errorf("warning names key_hash %v, want %s", warned[0]["key_hash"], e.keyHash(t, "k"))
			}
		})
	}
}

// A duplicate that waited for the first request (concurrent: wait) is
// answered in a coding it accepts too, whatever the first accepted.
func TestWaitedDuplicateIsAnsweredInACodingItAccepts(t *testing.T) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	encode := encodingUpstream("gzip", func(s string) []byte { return gzipped(t, s) })
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		encode(w, r)
	}, withPolicy(func(p *Policy) { p.Concurrent, p.WaitTimeout = ConcurrentWait, 30*time.Second }))
	var wg sync.WaitGroup
	var first, dup *response
	wg.Add(2)
	go func() { defer wg.Done(); first = e.doAccepting(t, "k", "gzip") }()
	<-arrived
	go func() { defer wg.Done(); dup = e.doAccepting(t, "k") }()
	gaugeIs(t, "the in-flight gauge", e.handler.metrics.inflight, 2)
	close(release)
	wg.Wait()
	if first.Header.Get("Content-Encoding") != "gzip" || e.up.calls.Load() != 1 {
		t.Fatalf("first: Content-Encoding %q, executions %d; want gzip, one", first.Header.Get("Content-Encoding"), e.up.calls.Load())
	}
	if !dup.replayed() || dup.body != plainBody || dup.Header.Get("Content-Encoding") != "" {
		t.Fatalf("waited duplicate: replayed=%v Content-Encoding %q body %q, want the decoded body", dup.replayed(), dup.Header.Get("Content-Encoding"), dup.body)
	}
}

// A replay whose record is not encoded, or is encoded in a coding the
// client accepts, costs no allocation for it: the check is a map lookup,
// then a read of the request's field.
func TestReplayInAnAcceptedCodingCostsNoAllocation(t *testing.T) {
	if raceEnabled() {
		t.Skip("the race detector adds allocations")
	}
	const key = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	measure := func(coding string) float64 {
		rig := newBenchRig(t, func(o *Options) {
			o.Transport = codingUpstream{fixedUpstream{contentLength: strconv.Itoa(len(benchResponseBody))}, coding}
		})
		rig.r.Header["Accept-Encoding"] = []string{"br;q=1.0, gzip;q=0.8, *;q=0.1"}
		rig.serve(key)
		return testing.AllocsPerRun(allocRuns, func() { rig.serve(key) })
	}
	if plain, gz := measure(""), measure("gzip"); gz != plain {
		t.Errorf("a replay of a gzip record to a client accepting gzip: %.0f allocations, one of a plain record %.0f", gz, plain)
	}
}

// codingUpstream is fixedUpstream marking its body with Content-Encoding
// coding (when not "").
type codingUpstream struct {
	fixedUpstream
	coding string
}

func (u codingUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := u.fixedUpstream.RoundTrip(r)
	if err == nil && u.coding != "" {
		res.Header["Content-Encoding"] = []string{u.coding}
	}
	return res, err
}
