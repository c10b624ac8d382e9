package proxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

var testAsyncSecret = []byte("0123456789abcdef0123456789abcdef")

// asyncEnv is a proxy whose routes allow respond-async, in front of an
// upstream that signals each arrival and answers once released.
func asyncEnv(t *testing.T, opts ...envOption) (e *env, arrived, release chan struct{}) {
	t.Helper()
	arrived, release = make(chan struct{}, 8), make(chan struct{})
	opts = append([]envOption{func(o *Options) {
		o.AsyncSecret = testAsyncSecret
		o.Default.Async = AsyncAllow
	}}, opts...)
	e = newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.Header().Set("X-Execution", itoa(1))
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"done":true}`)
	}, opts...)
	return e, arrived, release
}

// poll GETs a status URL with header pairs.
func (e *env) poll(t *testing.T, loc string, header ...string) *response {
	t.Helper()
	return e.do(t, "GET", loc, "", "", header...)
}

func TestRespondAsyncAnswers202BeforeTheUpstreamAnswers(t *testing.T) {
	e, arrived, release := asyncEnv(t)
	r := e.do(t, "POST", "/x", "k1", "{}", "Prefer", "respond-async")
	// The upstream has not been released: the 202 came without its answer.
	if r.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d %s, want 202", r.StatusCode, r.body)
	}
	loc := r.Header.Get("Location")
	if !strings.HasPrefix(loc, DefaultAsyncPath) || strings.Contains(loc, "k1") || strings.Contains(loc, e.keyHash(t, "k1")) {
		t.Fatalf("Location %q: want a status URL under %s naming neither the key nor its hash", loc, DefaultAsyncPath)
	}
	if got := r.Header.Get("Preference-Applied"); got != "respond-async" {
		t.Errorf("Preference-Applied %q", got)
	}
	if r.Header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	<-arrived
	if got := e.up.last().Header["Prefer"]; got != nil {
		t.Errorf("upstream got Prefer %q: the proxy applies respond-async, the upstream must not too", got)
	}

	if p := e.poll(t, loc); p.StatusCode != http.StatusAccepted || p.Header.Get("Retry-After") == "" {
		t.Fatalf("poll while running: %d %s, want 202 with Retry-After", p.StatusCode, p.body)
	}
	close(release)
	if err := e.handler.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := e.poll(t, loc)
	if p.StatusCode != http.StatusCreated || p.body != `{"done":true}` || !p.replayed() {
		t.Fatalf("poll once recorded: %d %q replayed=%v, want the recorded 201", p.StatusCode, p.body, p.replayed())
	}
	if n := e.up.calls.Load(); n != 1 {
		t.Errorf("upstream executed %d times, want 1", n)
	}
	if got := e.outcomes(defaultRoute, OutcomeAcceptedAsync); got != 1 {
		t.Errorf("accepted_async = %v, want 1", got)
	}
}

func TestRespondAsyncRetryWhileRunningGetsTheSame202(t *testing.T) {
	e, arrived, release := asyncEnv(t)
	first := e.do(t, "POST", "/x", "k1", "{}", "Prefer", "respond-async")
	<-arrived
	again := e.do(t, "POST", "/x", "k1", "{}", "Prefer", "wait=5, Respond-Async")
	if again.StatusCode != http.StatusAccepted || again.Header.Get("Location") != first.Header.Get("Location") {
		t.Fatalf("retry while running: %d Location %q, want 202 at %q", again.StatusCode, again.Header.Get("Location"), first.Header.Get("Location"))
	}
	close(release)
	if err := e.handler.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := e.do(t, "POST", "/x", "k1", "{}", "Prefer", "respond-async")
	if done.StatusCode != http.StatusCreated || !done.replayed() {
		t.Fatalf("retry once recorded: %d, want the recorded 201 replayed", done.StatusCode)
	}
	if n := e.up.calls.Load(); n != 1 {
		t.Errorf("upstream executed %d times, want 1", n)
	}
	if got := e.outcomes(defaultRoute, OutcomeAcceptedAsync); got != 2 {
		t.Errorf("accepted_async = %v, want 2", got)
	}
}

func TestStatusURLNeedsTheOriginalScope(t *testing.T) {
	e, arrived, release := asyncEnv(t)
	r := e.do(t, "POST", "/x", "k1", "{}", "Prefer", "respond-async", "Authorization", "Bearer alice")
	<-arrived
	close(release)
	if err := e.handler.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	loc := r.Header.Get("Location")
	for name, p := range map[string]*response{
		"another Authorization": e.poll(t, loc, "Authorization", "Bearer mallory"),
		"no Authorization":      e.poll(t, loc),
		"a forged URL":          e.poll(t, loc[:len(loc)-2]+"AA", "Authorization", "Bearer alice"),
		"not a status URL":      e.poll(t, DefaultAsyncPath+"x", "Authorization", "Bearer alice"),
	} {
		if p.StatusCode != http.StatusNotFound || p.problemType() != "status-unknown" {
			t.Errorf("%s: %d %s, want 404 status-unknown", name, p.StatusCode, p.body)
		}
	}
	if p := e.poll(t, loc, "Authorization", "Bearer alice"); p.StatusCode != http.StatusCreated {
		t.Errorf("the original's scope: %d %s, want the recorded 201", p.StatusCode, p.body)
	}
	if n := e.up.calls.Load(); n != 1 {
		t.Errorf("upstream saw %d requests, want 1: a status URL is never forwarded", n)
	}
}

func TestStatusURLOfAForgottenKeyIs404(t *testing.T) {
	e, arrived, release := asyncEnv(t)
	r := e.do(t, "POST", "/x", "k1", "{}", "Prefer", "respond-async")
	<-arrived
	close(release)
	if err := e.handler.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.handler.forgetter.Delete(context.Background(), e.keyHash(t, "k1")); err != nil {
		t.Fatal(err)
	}
	if p := e.poll(t, r.Header.Get("Location")); p.StatusCode != http.StatusNotFound {
		t.Errorf("poll of a forgotten key: %d %s, want 404", p.StatusCode, p.body)
	}
}

func TestRespondAsyncIgnoredWhereNotAllowed(t *testing.T) {
	for name, opt := range map[string]envOption{
		"async: off":  func(o *Options) { o.Default.Async = AsyncOff },
		"no secret":   func(o *Options) { o.AsyncSecret = nil },
		"no Prefer":   nil,
		"another one": nil,
	} {
		t.Run(name, func(t *testing.T) {
			opts := []envOption{}
			if opt != nil {
				opts = append(opts, opt)
			}
			e, arrived, release := asyncEnv(t, opts...)
			close(release)
			prefer := "respond-async"
			switch name {
			case "no Prefer":
				prefer = ""
			case "another one":
				prefer = "return=minimal, respond-asynchronously"
			}
			r := e.do(t, "POST", "/x", "k1", "{}", "Prefer", prefer)
			<-arrived
			if r.StatusCode != http.StatusCreated || r.Header.Get("Preference-Applied") != "" {
				t.Fatalf("%d, Preference-Applied %q: want the upstream's 201, served as without the preference", r.StatusCode, r.Header.Get("Preference-Applied"))
			}
		})
	}
}

func TestRespondAsyncWithoutRoomAmongDetachedCallsIsServedSynchronously(t *testing.T) {
	e, arrived, release := asyncEnv(t, func(o *Options) { o.MaxDetached = 1 })
	first := e.do(t, "POST", "/x", "a", "{}", "Prefer", "respond-async")
	<-arrived
	if first.StatusCode != http.StatusAccepted {
		t.Fatalf("first: %d", first.StatusCode)
	}
	second := make(chan *response, 1)
	go func() { second <- e.do(t, "POST", "/x", "b", "{}", "Prefer", "respond-async") }()
	<-arrived
	close(release)
	if r := <-second; r.StatusCode != http.StatusCreated || r.Header.Get("Preference-Applied") != "" {
		t.Fatalf("second, past max_detached: %d, want the upstream's 201 without Preference-Applied", r.StatusCode)
	}
	if n := testutil.ToFloat64(e.handler.metrics.detachRefused); n != 1 {
		t.Errorf("detach refused = %v, want 1", n)
	}
	if err := e.handler.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A respond-async call counts its request body and max_response_body
// toward upstream.max_detached_bytes, as any detached call does.
func TestRespondAsyncPastMaxDetachedBytesIsServedSynchronously(t *testing.T) {
	e, arrived, release := asyncEnv(t, func(o *Options) { o.MaxDetachedBytes = o.Default.MaxResponseBody })
	close(release)
	r := e.do(t, "POST", "/x", "a", "{}", "Prefer", "respond-async") // "{}" does not fit beside max_response_body
	<-arrived
	if r.StatusCode != http.StatusCreated || r.Header.Get("Preference-Applied") != "" {
		t.Fatalf("past max_detached_bytes: %d, want the upstream's 201 without Preference-Applied", r.StatusCode)
	}
	if n := testutil.ToFloat64(e.handler.metrics.detachRefused); n != 1 {
		t.Errorf("detach refused = %v, want 1", n)
	}
}

func TestStatusURLAnswersGetAndHeadOnly(t *testing.T) {
	e, _, release := asyncEnv(t)
	close(release)
	r := e.do(t, "POST", DefaultAsyncPath+"x", "", "{}")
	if r.StatusCode != http.StatusMethodNotAllowed || r.Header.Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST to a status URL: %d Allow %q", r.StatusCode, r.Header.Get("Allow"))
	}
	if n := e.up.calls.Load(); n != 0 {
		t.Errorf("upstream saw %d requests, want 0", n)
	}
}

// Without an async_secret respond-async is off and there are no status
// URLs: a request under async_path is the upstream's, as any other path.
func TestWithoutAnAsyncSecretTheStatusPathIsForwarded(t *testing.T) {
	e := newEnv(t, nil)
	r := e.do(t, "GET", DefaultAsyncPath+"x", "", "")
	if r.StatusCode != http.StatusCreated || e.up.calls.Load() != 1 {
		t.Fatalf("GET %sx without an async_secret: %d %s, upstream saw %d requests; want the upstream's 201",
			DefaultAsyncPath, r.StatusCode, r.body, e.up.calls.Load())
	}
}

func TestUpstreamKeepsTheOtherPreferences(t *testing.T) {
	h := http.Header{"Prefer": {"return=minimal, respond-async; x=1", "Respond-Async, wait=5"}}
	dropRespondAsync(h)
	if got := h["Prefer"]; len(got) != 1 || got[0] != "return=minimal, wait=5" {
		t.Errorf("Prefer %q, want [return=minimal, wait=5]", got)
	}
}

func TestUpstreamKeepsAQuotedPreferenceWhole(t *testing.T) {
	h := http.Header{"Prefer": {`respond-async, foo="a,b;c", wait=5`}}
	dropRespondAsync(h)
	if got := h["Prefer"]; len(got) != 1 || got[0] != `foo="a,b;c", wait=5` {
		t.Errorf("Prefer %q, want [foo=\"a,b;c\", wait=5]", got)
	}
}

func TestPrefersAsyncReadsRFC7240(t *testing.T) {
	for v, want := range map[string]bool{
		"respond-async":                      true,
		"RESPOND-ASYNC":                      true,
		"wait=10, respond-async":             true,
		"return=minimal; x=y, respond-async": true,
		" respond-async ; foo=bar":           true,
		"respond-async=1":                    true,
		"respond-asynchronously":             false,
		"return=respond-async":               false,
		`foo="a, respond-async, b"`:          false, // one preference, its value quoted
		`foo="a\", respond-async, b"`:        false, // an escaped quote inside the value
		`foo="a,b", respond-async`:           true,
		`foo="a\"b", respond-async`:          true, // the quote escaped, the value ends after b
		"":                                   false,
	} {
		if got := prefersAsync(http.Header{"Prefer": {v}}); got != want {
			t.Errorf("Prefer %q: %v, want %v", v, got, want)
		}
	}
}

// A key whose answer was lost, being settled by asking the upstream, is
// still running as far as its status URL says: 202 until the lookup
// settles it, then the answer the lookup found.
func TestStatusURLOfAKeyBeingSettledIs202(t *testing.T) {
	looking, found := make(chan struct{}, 8), make(chan struct{})
	l := &ledger{die: 1, lookup: func(http.ResponseWriter, *http.Request) bool {
		looking <- struct{}{}
		<-found
		return false // the ledger answers from its charges
	}}
	e := reconcileEnv(t, l, func(p *Policy) { p.Async = AsyncAllow })
	e.handler.async.secret = testAsyncSecret // reconcileEnv sets policies only; no request was served yet
	r := e.do(t, "POST", "/v1/charges", "k1", `{"amount":5}`, "Prefer", "respond-async")
	if r.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d %s, want 202", r.StatusCode, r.body)
	}
	loc := r.Header.Get("Location")
	<-looking // the charge's answer was lost: the lookup is under way
	if p := e.poll(t, loc); p.StatusCode != http.StatusAccepted {
		t.Fatalf("poll while the key is settled: %d %s, want 202", p.StatusCode, p.body)
	}
	close(found)
	if err := e.handler.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := e.poll(t, loc)
	if p.StatusCode != http.StatusOK || !strings.Contains(p.body, `"ch_1"`) || p.Header.Get(IdempotencyReconciled) != "true" {
		t.Fatalf("poll once settled: %d %s, want the charge the lookup found", p.StatusCode, p.body)
	}
	if effects, _ := l.count(); effects != 1 {
		t.Errorf("effects on the ledger = %d, want 1", effects)
	}
}

// A status URL names one request's answer: once its record is gone (it
// expired, or was deleted) and the client sends the key again with another
// payload, the URL is as expired as the record was, while that request
// runs and after it is recorded, not that request's answer.
func TestStatusURLOfAKeySentAgainWithAnotherPayloadIs404(t *testing.T) {
	e, arrived, release := asyncEnv(t)
	r := e.do(t, "POST", "/x", "k1", `{"n":1}`, "Prefer", "respond-async")
	<-arrived
	close(release)
	if err := e.handler.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	loc := r.Header.Get("Location")
	if p := e.poll(t, loc); p.StatusCode != http.StatusCreated {
		t.Fatalf("poll once recorded: %d %s, want the recorded 201", p.StatusCode, p.body)
	}
	if err := e.handler.forgetter.Delete(context.Background(), e.keyHash(t, "k1")); err != nil {
		t.Fatal(err)
	}
	again := e.do(t, "POST", "/x", "k1", `{"n":2}`)
	<-arrived
	if again.StatusCode != http.StatusCreated || again.replayed() {
		t.Fatalf("the key sent again: %d replayed=%v, want a new execution's 201", again.StatusCode, again.replayed())
	}
	if p := e.poll(t, loc); p.StatusCode != http.StatusNotFound || p.problemType() != "status-unknown" {
		t.Errorf("the first request's status URL after its key was used again: %d %s, want 404 status-unknown", p.StatusCode, p.body)
	}
}

// An answer over max_response_body has no first caller under
// respond-async to stream it to: its status URL gives its status and
// headers marked Idempotent-Body-Omitted, never a second execution.
func TestStatusURLOfAnAnswerOverMaxResponseBodyMarksTheBodyOmitted(t *testing.T) {
	e, arrived, release := asyncEnv(t, withPolicy(func(p *Policy) { p.MaxResponseBody = 4 }))
	r := e.do(t, "POST", "/x", "k1", "{}", "Prefer", "respond-async")
	<-arrived
	close(release)
	if err := e.handler.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := e.poll(t, r.Header.Get("Location"))
	if p.StatusCode != http.StatusCreated || p.body != "" || p.Header.Get("Idempotent-Body-Omitted") != "true" || !p.replayed() {
		t.Fatalf("poll: %d %q %v, want the recorded 201 without its body, marked omitted", p.StatusCode, p.body, p.Header)
	}
	if n := e.up.calls.Load(); n != 1 {
		t.Errorf("upstream executed %d times, want 1", n)
	}
}
