package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// raw sends one raw HTTP/1.1 request to the proxy, for what net/http's
// client will not send (a Host it would lower-case, an absolute-form target).
func (e *env) raw(t *testing.T, req string) *response {
	t.Helper()
	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return &response{Response: res, body: string(b)}
}

// rawPost renders a keyed JSON POST; target is the request target, host
// the Host header, key "" for none.
func rawPost(target, host, key string, extra ...string) string {
	var b strings.Builder
	b.WriteString("POST " + target + " HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n")
	if key != "" {
		b.WriteString("Idempotency-Key: " + key + "\r\n")
	}
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n{}")
	return b.String()
}

// manyHeaders are more header lines than a request's names are walked
// for (scanHeaders): with them its headers are looked up one by one.
func manyHeaders(header ...string) []string {
	for i := range len(methodOverrideHeaders) + 1 {
		header = append(header, "X-Filler-"+strconv.Itoa(i), "x")
	}
	return header
}

// Only a real upgrade (a GET with Connection: upgrade and Upgrade) is passed
// through unprotected; an upgrade offer on a protected method is dropped
// and the request handled like any other, among few headers or many.
func TestOnlyARealUpgradeIsPassedThrough(t *testing.T) {
	offers := map[string][]string{
		"h2c, as curl --http2 sends": {"Connection", "Upgrade, HTTP2-Settings", "Upgrade", "h2c", "HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA"},
		"websocket on a POST":        {"Connection", "Upgrade", "Upgrade", "websocket"},
		"empty Upgrade":              {"Upgrade", ""},
		"Upgrade without Connection": {"Upgrade", "x"},
		"HTTP2-Settings alone":       {"HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA"},
	}
	for name, header := range offers {
		offers[name+", among many headers"] = manyHeaders(header...)
	}
	for name, header := range offers {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, nil)
			first := e.do(t, "POST", "/x", "k", "{}", header...)
			again := e.do(t, "POST", "/x", "k", "{}", header...)
			if e.up.calls.Load() != 1 || !again.replayed() || again.body != first.body {
				t.Fatalf("executions = %d, retry replayed=%v; want one execution and its replay", e.up.calls.Load(), again.replayed())
			}
			seen := e.up.last().Header
			if seen.Get("Upgrade") != "" || seen.Get("HTTP2-Settings") != "" || httpguts.HeaderValuesContainsToken(seen["Connection"], "upgrade") {
				t.Fatalf("upstream saw the upgrade offer: %v", seen)
			}
		})
	}
	t.Run("keyless offer on a route requiring a key", func(t *testing.T) {
		e := newEnv(t, nil, withPolicy(func(p *Policy) { p.RequireKey = true }))
		r := e.do(t, "POST", "/x", "", "{}", "Connection", "Upgrade", "Upgrade", "x")
		if r.StatusCode != http.StatusBadRequest || r.problemType() != "missing-key" || e.up.calls.Load() != 0 {
			t.Fatalf("got %d %q, executions %d; want 400 missing-key and no upstream call", r.StatusCode, r.problemType(), e.up.calls.Load())
		}
	})
	t.Run("websocket handshake on a protected GET", func(t *testing.T) {
		e := newEnv(t, nil, withPolicy(func(p *Policy) { p.Methods = append(p.Methods, http.MethodGet) }))
		for range 2 {
			if r := e.do(t, "GET", "/ws", "k", "", "Connection", "Upgrade", "Upgrade", "websocket"); r.replayed() {
				t.Fatal("an upgrade was replayed")
			}
		}
		if got := e.up.calls.Load(); got != 2 {
			t.Fatalf("executions = %d, want 2: a real upgrade passes through", got)
		}
		if got := e.outcomes(defaultRoute, OutcomePassthrough); got != 2 {
			t.Errorf("passthrough = %v, want 2", got)
		}
	})
}

// The host is part of the fingerprint: the same key sent to another host,
// by Host header or by an absolute-form target, is a 422, never the first
// host's response. Case and a trailing dot do not make another host.
func TestSameKeyOnAnotherHostIsAMismatch(t *testing.T) {
	e := newEnv(t, nil)
	first := e.raw(t, rawPost("/x", "tenant-a.example", "k"))
	if first.StatusCode != http.StatusCreated {
		t.Fatalf("first: %d", first.StatusCode)
	}
	for _, host := range []string{"TENANT-A.example", "tenant-a.example.", "tenant-a.example:8080"} {
		if r := e.raw(t, rawPost("/x", host, "k")); !r.replayed() || r.body != first.body {
			t.Fatalf("Host %s: %d replayed=%v, want the replay: it is the same host", host, r.StatusCode, r.replayed())
		}
	}
	for name, req := range map[string]string{
		"Host header":          rawPost("/x", "tenant-b.example", "k"),
		"absolute-form target": rawPost("http://tenant-b.example/x", "tenant-a.example", "k"),
	} {
		if r := e.raw(t, req); r.StatusCode != http.StatusUnprocessableEntity || r.problemType() != "payload-mismatch" {
			t.Fatalf("%s naming another host: %d %s, want 422 payload-mismatch", name, r.StatusCode, r.body)
		}
	}
	if got := e.up.calls.Load(); got != 1 {
		t.Fatalf("executions = %d, want 1", got)
	}
}

// fingerprint_host: false is for a proxy that several host names reach for
// one service: the same key replays whichever name a retry uses.
func TestFingerprintHostOffReplaysAcrossHostNames(t *testing.T) {
	e := newEnv(t, nil, withPolicy(func(p *Policy) { p.FingerprintHost = false }))
	first := e.raw(t, rawPost("/x", "api.example", "k"))
	if first.StatusCode != http.StatusCreated {
		t.Fatalf("first: %d", first.StatusCode)
	}
	if r := e.raw(t, rawPost("/x", "api-internal.example", "k")); !r.replayed() || r.body != first.body {
		t.Fatalf("other host name: %d replayed=%v, want the replay", r.StatusCode, r.replayed())
	}
	if got := e.up.calls.Load(); got != 1 {
		t.Fatalf("executions = %d, want 1", got)
	}
}

// Routes match hosts lower-cased and without a trailing dot: neither
// spelling slips past a host route that requires a key.
func TestHostRouteMatchesAnySpellingOfItsHost(t *testing.T) {
	p := DefaultPolicy()
	p.RequireKey = true
	e := newEnv(t, nil, func(o *Options) { o.Routes = []Route{{Pattern: "a.example/", Policy: p}} })
	for _, host := range []string{"a.example", "A.EXAMPLE", "a.example.", "A.Example.:80"} {
		if r := e.raw(t, rawPost("/x", host, "")); r.StatusCode != http.StatusBadRequest || r.problemType() != "missing-key" {
			t.Errorf("Host %s without a key: %d %s, want 400 missing-key", host, r.StatusCode, r.body)
		}
	}
	if got := e.up.calls.Load(); got != 0 {
		t.Fatalf("executions = %d, want 0", got)
	}
}

func TestNormalHost(t *testing.T) {
	for in, want := range map[string]string{
		"a.example": "a.example", "A.Example": "a.example", "a.example.": "a.example",
		"A.EXAMPLE.:8080": "a.example", "a.example:80": "a.example", "[::1]:80": "[::1]", "[::1]": "[::1]", "": "",
		":8080": "", // a port alone, which Go's server takes as a Host
	} {
		if got := normalHost(in); got != want {
			t.Errorf("normalHost(%q) = %q, want %q", in, got, want)
		}
	}
}

// Request trailers are part of the payload: the same key with another
// trailer value is a 422.
func TestRequestTrailersArePartOfTheFingerprint(t *testing.T) {
	e := newEnv(t, nil)
	send := func(amount string) *response {
		t.Helper()
		pr, pw := io.Pipe()
		go func() { pw.Write([]byte(`{"charge":1}`)); pw.Close() }()
		req, _ := http.NewRequest("POST", e.srv.URL+"/x", pr) // unknown length: chunked
		req.Header.Set("Idempotency-Key", "k")
		req.Trailer = http.Header{"X-Amount": {amount}}
		res, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return &response{Response: res, body: string(b)}
	}
	send("100")
	if r := send("100"); !r.replayed() {
		t.Fatalf("same trailer: %d replayed=%v, want the replay", r.StatusCode, r.replayed())
	}
	if r := send("999999"); r.StatusCode != http.StatusUnprocessableEntity || r.problemType() != "payload-mismatch" {
		t.Fatalf("other trailer value: %d %s, want 422 payload-mismatch", r.StatusCode, r.body)
	}
	if got := e.up.calls.Load(); got != 1 {
		t.Fatalf("executions = %d, want 1", got)
	}
}

// A trailer announced but never sent adds nothing to the fingerprint: the
// request hashes as the one sent without the announcement, beside sent
// trailers too.
func TestAnnouncedTrailerThatNeverCameIsNotFingerprinted(t *testing.T) {
	at := readAs{method: http.MethodPost, path: "/x"}
	fp := func(trailer http.Header) store.Fingerprint {
		r := httptest.NewRequest(http.MethodPost, "/x", nil)
		r.Trailer = trailer
		return fingerprint(r, at, "", []byte("{}"), nil)
	}
	for name, c := range map[string][2]http.Header{
		"alone":             {{"X-Signature": nil}, nil},
		"beside a sent one": {{"X-Amount": {"100"}, "X-Signature": nil}, {"X-Amount": {"100"}}},
	} {
		if fp(c[0]) != fp(c[1]) {
			t.Errorf("%s: trailers %v fingerprint apart from %v", name, c[0], c[1])
		}
	}
}

// scope_headers "Cookie:NAME" scopes keys by that one cookie: two sessions
// sending the same key never get each other's response.
func TestCookieScopeSeparatesSessions(t *testing.T) {
	e := newEnv(t, nil, withPolicy(func(p *Policy) { p.ScopeHeaders = []ScopeHeader{{Cookie: "session"}} }))
	alice := e.do(t, "POST", "/x", "shared", "{}", "Cookie", "session=alice; theme=dark")
	bob := e.do(t, "POST", "/x", "shared", "{}", "Cookie", "theme=dark; session=bob")
	if bob.replayed() || e.up.calls.Load() != 2 {
		t.Fatalf("bob was replayed alice's response (executions %d)", e.up.calls.Load())
	}
	// Other cookies do not scope: alice's retry with another theme is hers.
	if r := e.do(t, "POST", "/x", "shared", "{}", "Cookie", "theme=light; session=alice"); !r.replayed() || r.body != alice.body {
		t.Fatalf("alice's retry: replayed=%v body %q, want her own response %q", r.replayed(), r.body, alice.body)
	}
	if r := e.do(t, "POST", "/x", "shared", "{}", "Cookie", "session=bob"); !r.replayed() || r.body != bob.body {
		t.Fatalf("bob's retry: replayed=%v, want his own response", r.replayed())
	}
}

// The key header is forwarded upstream even when the client names it in
// Connection, which would otherwise make the reverse proxy drop it, among
// few headers or many.
func TestKeyHeaderForwardedWhenListedInConnection(t *testing.T) {
	for name, header := range map[string][]string{
		"few headers":  {"Connection", "Idempotency-Key, X-Other", "X-Other", "gone"},
		"many headers": manyHeaders("Connection", "Idempotency-Key, X-Other", "X-Other", "gone"),
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.do(t, "POST", "/x", "k-1", "{}", header...)
			seen := e.up.last().Header
			if got := seen.Get("Idempotency-Key"); got != "k-1" {
				t.Fatalf("upstream saw Idempotency-Key %q, want k-1", got)
			}
			if got := seen.Get("X-Other"); got != "" {
				t.Errorf("X-Other, named in Connection, reached the upstream: %q", got)
			}
		})
	}
}

// lockedBuffer collects log output written from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines returns the JSON log lines whose msg contains substr.
func (l *lockedBuffer) lines(t *testing.T, substr string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		var m map[string]any
		if line == "" {
			continue
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if msg, _ := m["msg"].(string); strings.Contains(msg, substr) {
			out = append(out, m)
		}
	}
	return out
}

func withLog(buf *lockedBuffer) envOption {
	return func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		o.AccessLogOutput = buf // as the binary writes them: beside the other lines
	}
}

// Every log line about a key carries its full key_hash, the storage key the
// key API takes.
func TestLogLinesCarryTheFullKeyHash(t *testing.T) {
	var logs lockedBuffer
	st := newFlaky(t)
	e := newEnv(t, nil, withStore(st), withLog(&logs))
	st.down.Store(true)
	e.do(t, "POST", "/x", "k", "{}")
	st.down.Store(false)
	e.do(t, "POST", "/x", "k", "{}")
	want := e.keyHash(t, "k")
	for _, msg := range []string{"store unavailable", "request"} {
		lines := logs.lines(t, msg)
		if len(lines) == 0 {
			t.Fatalf("no %q log line", msg)
		}
		for _, l := range lines {
			if got := l["key_hash"]; got != want {
				t.Fatalf("%q line: key_hash = %v, want the full storage key %s", msg, got, want)
			}
		}
	}
}
