package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync/atomic"
	"testing"
	"time"
)

// An upstream that says no-store is delivered, not recorded, and its key
// released: the retry executes again. The header never reaches a client,
// replays included.
func TestUpstreamNoStoreReleasesTheKey(t *testing.T) {
	var noStore atomic.Bool
	noStore.Store(true)
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		if noStore.Load() {
			w.Header().Set("Idempotency-Control", "private, No-Store")
		} else {
			w.Header().Set("Idempotency-Control", "x-unknown=1")
		}
		w.WriteHeader(http.StatusAccepted)
	})
	first := e.do(t, "POST", "/jobs", "k-1", `{}`)
	if first.StatusCode != http.StatusAccepted || first.Header["Idempotency-Control"] != nil {
		t.Fatalf("no-store response: %d, Idempotency-Control %q; want 202 without the header", first.StatusCode, first.Header["Idempotency-Control"])
	}
	noStore.Store(false)
	second := e.do(t, "POST", "/jobs", "k-1", `{}`)
	if second.replayed() || e.up.calls.Load() != 2 {
		t.Fatalf("retry after no-store: replayed=%v executions=%d, want executed again", second.replayed(), e.up.calls.Load())
	}
	third := e.do(t, "POST", "/jobs", "k-1", `{}`)
	if !third.replayed() || e.up.calls.Load() != 2 {
		t.Fatalf("retry after a recorded response: replayed=%v, want replayed", third.replayed())
	}
	for name, r := range map[string]*response{"executed": second, "replayed": third} {
		if v := r.Header["Idempotency-Control"]; v != nil {
			t.Errorf("%s response carries Idempotency-Control %q", name, v)
		}
	}
	if got := e.outcomes(defaultRoute, OutcomeReleased); got != 1 {
		t.Errorf("released = %v, want 1", got)
	}
	// Unkeyed responses lose the header too.
	noStore.Store(true)
	if r := e.do(t, "POST", "/jobs", "", `{}`); r.Header["Idempotency-Control"] != nil {
		t.Errorf("unkeyed response carries Idempotency-Control %q", r.Header["Idempotency-Control"])
	}
}

// A control header configured in lower case is the same header: the
// route keeps its name canonical, so it is read and removed from keyed
// and unkeyed responses alike, and from the trailers of an unkeyed one.
func TestUpstreamControlHeaderConfiguredInLowerCaseIsRemoved(t *testing.T) {
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Proxy-Control")
		w.Header().Set("X-Proxy-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "ok")
		w.Header().Set("X-Proxy-Control", "no-store")
		w.Header().Set(http.TrailerPrefix+"X-Proxy-Control", "no-store")
	}, withPolicy(func(p *Policy) { p.UpstreamControlHeader = "x-proxy-control" }))
	keyed := e.do(t, "POST", "/jobs", "k-1", `{}`)
	if keyed.Header["X-Proxy-Control"] != nil || keyed.Trailer["X-Proxy-Control"] != nil {
		t.Errorf("keyed response carries the control header: header %q, trailer %q", keyed.Header["X-Proxy-Control"], keyed.Trailer["X-Proxy-Control"])
	}
	if again := e.do(t, "POST", "/jobs", "k-1", `{}`); again.replayed() || e.up.calls.Load() != 2 {
		t.Errorf("no-store under a lower-case name: replayed=%v executions=%d, want executed again", again.replayed(), e.up.calls.Load())
	}
	unkeyed := e.do(t, "POST", "/jobs", "", `{}`)
	if unkeyed.Header["X-Proxy-Control"] != nil || unkeyed.Trailer["X-Proxy-Control"] != nil {
		t.Errorf("unkeyed response carries the control header: header %q, trailer %q", unkeyed.Header["X-Proxy-Control"], unkeyed.Trailer["X-Proxy-Control"])
	}
}

func TestUpstreamControlHeaderCanBeDisabled(t *testing.T) {
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Idempotency-Control", "no-store")
	}, withPolicy(func(p *Policy) { p.UpstreamControlHeader = "" }))
	first := e.do(t, "POST", "/jobs", "k-1", `{}`)
	if first.Header.Get("Idempotency-Control") != "no-store" {
		t.Fatal("a disabled control header was removed")
	}
	if again := e.do(t, "POST", "/jobs", "k-1", `{}`); !again.replayed() {
		t.Fatal("a disabled control header released the key")
	}
}

// Idempotency-Expires is on executed and replayed responses to keyed
// requests, at record creation + ttl; never on a response that was not
// recorded nor on the proxy's own problems.
func TestAdvertisedExpiryIsCreationPlusTTL(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusCreated)
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
	}, withPolicy(func(p *Policy) { p.AdvertiseExpiry, p.TTL = true, time.Hour }))
	before := time.Now().Truncate(time.Second)
	first := e.do(t, "POST", "/x", "k-1", `{}`)
	after := time.Now()
	exp, err := http.ParseTime(first.Header.Get(ExpiresHeader))
	if err != nil {
		t.Fatalf("executed response: Idempotency-Expires %q: %v", first.Header.Get(ExpiresHeader), err)
	}
	if exp.Before(before.Add(time.Hour)) || exp.After(after.Add(time.Hour)) {
		t.Errorf("Idempotency-Expires %v, want creation + 1h (%v..%v)", exp, before.Add(time.Hour), after.Add(time.Hour))
	}
	replay := e.do(t, "POST", "/x", "k-1", `{}`)
	rexp, err := http.ParseTime(replay.Header.Get(ExpiresHeader))
	if !replay.replayed() || err != nil || rexp.After(exp.Add(time.Second)) || rexp.Before(exp.Add(-time.Second)) {
		t.Errorf("replay: Idempotency-Expires %q (%v), want about %v", replay.Header.Get(ExpiresHeader), err, exp)
	}
	for name, r := range map[string]*response{
		"mismatch": e.do(t, "POST", "/x", "k-1", `{"other":1}`),
		"no key":   e.do(t, "POST", "/x", "", `{}`),
	} {
		if v := r.Header.Get(ExpiresHeader); v != "" {
			t.Errorf("%s: Idempotency-Expires %q, want none", name, v)
		}
	}
	status.Store(http.StatusServiceUnavailable) // a release status
	if r := e.do(t, "POST", "/x", "k-2", `{}`); r.Header.Get(ExpiresHeader) != "" {
		t.Errorf("released response: Idempotency-Expires %q, want none", r.Header.Get(ExpiresHeader))
	}
}

func TestExpiryIsNotAdvertisedOnProblemResponses(t *testing.T) {
	// The upstream drops the connection after the request arrived: under
	// on_upstream_error: keep the proxy's 502 is recorded and replayed.
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}, withPolicy(func(p *Policy) { p.AdvertiseExpiry, p.OnUpstreamError = true, UpstreamErrorKeep }))
	for i, want := range []bool{false, true} {
		r := e.do(t, "POST", "/x", "k-1", `{}`)
		if r.StatusCode != http.StatusBadGateway || r.replayed() != want {
			t.Fatalf("request %d: %d replayed=%v, want 502 replayed=%v", i, r.StatusCode, r.replayed(), want)
		}
		if v := r.Header.Get(ExpiresHeader); v != "" {
			t.Errorf("request %d: the proxy's 502 carries Idempotency-Expires %q", i, v)
		}
	}
}

// A trailer the upstream did not announce reaches the client under
// http.TrailerPrefix, as the reverse proxy sets it: the control header
// sent so is removed from a keyed response as from an unkeyed one, and the
// other trailers still arrive.
func TestControlHeaderSentAsUnannouncedTrailerIsRemoved(t *testing.T) {
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Trailer", "X-Checksum")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "done")
		h.Set("X-Checksum", "c1")
		h.Set(http.TrailerPrefix+"Idempotency-Control", "no-store")
		h.Set(http.TrailerPrefix+"X-Signature", "s1")
	})
	for _, key := range []string{"k-1", ""} {
		r := e.do(t, "POST", "/jobs", key, `{}`)
		if v, ok := r.Trailer["Idempotency-Control"]; ok {
			t.Errorf("key %q: trailers carry Idempotency-Control %q", key, v)
		}
		if r.Trailer.Get("X-Checksum") != "c1" || r.Trailer.Get("X-Signature") != "s1" {
			t.Errorf("key %q: trailers %v, want X-Checksum and X-Signature delivered", key, r.Trailer)
		}
	}
}

// postWithEarlyHints sends POST /jobs with key, or without a key when key is
// "", reads the response to its end, and returns it with the one interim
// (103) response the upstream sends before it, which carries a Link; it
// fails the test when another set of interim responses came.
func (e *env) postWithEarlyHints(t *testing.T, key string) (*http.Response, textproto.MIMEHeader) {
	t.Helper()
	var interim []textproto.MIMEHeader
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		interim = append(interim, h)
		return nil
	}}
	req := e.request(t, httptrace.WithClientTrace(context.Background(), trace), "/jobs", key)
	if key == "" {
		req.Header.Del("Idempotency-Key")
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(res.Body)
	res.Body.Close()
	if len(interim) != 1 || interim[0].Get("Link") == "" {
		t.Fatalf("key %q: interim responses %v, want the 103 with its Link", key, interim)
	}
	return res, interim[0]
}

// The control header is for the proxy alone wherever the upstream puts it:
// an interim (1xx) response and the trailers lose it as the final header
// section does, keyed or not. Only the final header section steers
// recording.
func TestControlHeaderIsRemovedFromInterimResponsesAndTrailers(t *testing.T) {
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Link", "</style.css>; rel=preload")
		h.Set("Idempotency-Control", "no-store")
		w.WriteHeader(http.StatusEarlyHints)
		clear(h)
		h.Set("Trailer", "Idempotency-Control, X-Checksum")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "done")
		h.Set("Idempotency-Control", "no-store")
		h.Set("X-Checksum", "c1")
		h.Set(http.TrailerPrefix+"idempotency-control", "no-store")
	})
	for _, key := range []string{"k-1", ""} {
		res, hints := e.postWithEarlyHints(t, key)
		if v := hints["Idempotency-Control"]; v != nil {
			t.Errorf("key %q: the 103 carries Idempotency-Control %q", key, v)
		}
		if res.Trailer.Get("X-Checksum") != "c1" {
			t.Errorf("key %q: trailers %v, want X-Checksum delivered", key, res.Trailer)
		}
		// Announced trailers are in the map before their value arrives.
		if v, ok := res.Trailer["Idempotency-Control"]; ok {
			t.Errorf("key %q: trailers carry Idempotency-Control %q", key, v)
		}
	}
	// The no-store of the 103 and of the trailer did not release the key.
	if r := e.do(t, "POST", "/jobs", "k-1", `{}`); !r.replayed() {
		t.Errorf("retry: replayed=%v, want the recorded response", r.replayed())
	}
}

// replay_exclude_headers names header fields, whatever the case they are
// configured in (a program embedding the handler sets them unchecked): a
// lower-case "set-cookie" keeps the first caller's cookie out of every
// replay, from the header section and from the trailers alike.
func TestReplayExcludeHeadersConfiguredInLowerCaseAreNotReplayed(t *testing.T) {
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Set-Cookie", "session=first-caller")
		w.Header().Set("Trailer", "X-Session")
		w.Write([]byte("ok"))
		w.Header().Set("X-Session", "first-caller")
	}, withPolicy(func(p *Policy) { p.ReplayExcludeHeaders = []string{"set-cookie", "x-session"} }))
	first := e.do(t, "POST", "/x", "k", "{}")
	if first.Header.Get("Set-Cookie") == "" || first.Trailer.Get("X-Session") == "" {
		t.Fatalf("first caller: header %v, trailers %v; want its Set-Cookie and X-Session", first.Header, first.Trailer)
	}
	replay := e.do(t, "POST", "/x", "k", "{}")
	if !replay.replayed() {
		t.Fatalf("retry: %d, not replayed", replay.StatusCode)
	}
	if v, ok := replay.Header["Set-Cookie"]; ok {
		t.Errorf("replay carries the first caller's Set-Cookie %q", v)
	}
	if v, ok := replay.Trailer["X-Session"]; ok {
		t.Errorf("replay carries the first caller's X-Session trailer %q", v)
	}
}

// An interim response is forwarded without the fields that belong to the
// upstream's connection, as the final one is: those its Connection field
// names, and the hop-by-hop fields. Keyed or not.
func TestInterimResponsesCarryNoHopByHopFields(t *testing.T) {
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Link", "</style.css>; rel=preload")
		h.Set("Connection", "X-Upstream-Hop")
		h.Set("X-Upstream-Hop", "upstream only")
		h.Set("Keep-Alive", "timeout=5")
		h.Set("Proxy-Authenticate", "Basic")
		w.WriteHeader(http.StatusEarlyHints)
		clear(h)
		w.WriteHeader(http.StatusCreated)
	})
	for _, key := range []string{"k-1", ""} {
		_, hints := e.postWithEarlyHints(t, key)
		for _, name := range []string{"Connection", "X-Upstream-Hop", "Keep-Alive", "Proxy-Authenticate"} {
			if v, ok := hints[name]; ok {
				t.Errorf("key %q: the 103 carries the upstream connection's %s %q", key, name, v)
			}
		}
	}
}
