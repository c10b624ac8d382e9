package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
)

// hdrAnswer tells the scripted upstream what to answer; the proxy forwards
// it and does not fingerprint it, so a retry with the same key may ask for
// another answer.
const hdrAnswer = "X-Test-Answer"

// scriptedUpstream answers what each request asks for in hdrAnswer:
//
//	"no-store"   409 with Idempotency-Control: no-store (try again later)
//	"hold"       201 once Release is called
//	"slow-body"  201, the status sent at once and the body after the wall
//	             clock has passed the next whole second
//	otherwise    201 with Idempotency-Control: audited (a token the proxy
//	             does not know, which must still never reach a client)
//
// Every body names its execution number, so a replay is told from a second
// execution.
type scriptedUpstream struct {
	srv     *httptest.Server
	held    chan struct{} // receives once per request that starts holding
	release chan struct{}
	once    sync.Once

	mu    sync.Mutex
	execs int
}

func startScriptedUpstream(t *testing.T) *scriptedUpstream {
	t.Helper()
	u := &scriptedUpstream{held: make(chan struct{}, 16), release: make(chan struct{})}
	u.srv = httptest.NewServer(http.HandlerFunc(u.handle))
	t.Cleanup(func() { u.Release(); u.srv.Close() })
	return u
}

func (u *scriptedUpstream) URL() string { return u.srv.URL }

// Execs is how many requests the upstream acted on.
func (u *scriptedUpstream) Execs() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.execs
}

// Release lets every held request answer, now and later.
func (u *scriptedUpstream) Release() { u.once.Do(func() { close(u.release) }) }

func (u *scriptedUpstream) handle(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	u.mu.Lock()
	u.execs++
	n := u.execs
	u.mu.Unlock()
	body := fmt.Sprintf(`{"exec":%d}`, n)
	w.Header().Set("Content-Type", "application/json")
	switch r.Header.Get(hdrAnswer) {
	case "no-store":
		w.Header().Set("Idempotency-Control", "no-store")
		w.WriteHeader(http.StatusConflict)
	case "not-found":
		w.WriteHeader(http.StatusNotFound)
	case "hold":
		u.held <- struct{}{}
		<-u.release
		w.WriteHeader(http.StatusCreated)
	case "slow-body":
		w.WriteHeader(http.StatusCreated)
		http.NewResponseController(w).Flush()
		// The time that passes is what is under test: the response
		// starts in one second of the clock and completes in the next.
		next := time.Now().Truncate(time.Second).Add(time.Second + 50*time.Millisecond)
		time.Sleep(time.Until(next))
	default:
		w.Header().Set("Idempotency-Control", "audited")
		w.WriteHeader(http.StatusCreated)
	}
	io.WriteString(w, body)
}

// scriptedConfig protects every route of up with the memory store or a
// fresh redis-server, under the given defaults (raw YAML values).
func scriptedConfig(t *testing.T, kind string, up *scriptedUpstream, defaults map[string]string) proxyConfig {
	t.Helper()
	cfg := proxyConfig{Upstream: up.URL(), UpstreamTimeout: 10 * time.Second, Memory: kind == "memory", Defaults: defaults}
	if kind == "redis" {
		cfg.RedisURL = redistest.Start(t).URL()
	}
	return cfg
}

// answer sends a keyed POST asking the upstream for answer.
func answer(t *testing.T, c *http.Client, p *proxyProc, key, answer string) reply {
	t.Helper()
	return mustSend(t, c, p.URL(), request{Key: key, Body: `{"amount":1}`, Header: map[string]string{hdrAnswer: answer}})
}

// TestUpstreamNoStoreReleasesTheKeyAndNeverLeaksTheControlHeader runs the
// built binary behind an upstream that answers a business 409 with
// Idempotency-Control: no-store: the client gets the 409 without the
// header, nothing is recorded, a retry with the same key executes again,
// and once the upstream answers normally that answer is recorded and
// replayed, the control header stripped from it and from every replay.
func TestUpstreamNoStoreReleasesTheKeyAndNeverLeaksTheControlHeader(t *testing.T) {
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			up := startScriptedUpstream(t)
			p := startProxy(t, "control-"+kind, scriptedConfig(t, kind, up, nil))
			c := newClient(t, 15*time.Second)

			for i := 1; i <= 2; i++ {
				r := answer(t, c, p, "order-1", "no-store")
				if r.Status != http.StatusConflict || r.Replayed() || r.Problem() != "" {
					t.Fatalf("attempt %d: %s %s, want the upstream's own 409, not replayed", i, r, r.Body)
				}
				if v, ok := r.Header["Idempotency-Control"]; ok {
					t.Errorf("attempt %d: the client received Idempotency-Control %q", i, v)
				}
				if got := up.Execs(); got != i {
					t.Fatalf("after attempt %d the upstream executed %d times, want %d: the key was not released", i, got, i)
				}
			}

			first := answer(t, c, p, "order-1", "ok")
			if first.Status != http.StatusCreated || first.Replayed() || up.Execs() != 3 {
				t.Fatalf("normal answer after two no-store ones: %s (upstream executions %d), want an executed 201", first, up.Execs())
			}
			for i, r := range []reply{first, answer(t, c, p, "order-1", "no-store"), answer(t, c, p, "order-1", "ok")} {
				if v, ok := r.Header["Idempotency-Control"]; ok {
					t.Errorf("response %d to the recorded key carries Idempotency-Control %q", i+1, v)
				}
				if i > 0 && (!r.Replayed() || r.Status != first.Status || r.Body != first.Body) {
					t.Errorf("retry %d: %s %q, want the replay of %s %q", i, r, r.Body, first, first.Body)
				}
			}
			if got := up.Execs(); got != 3 {
				t.Errorf("upstream executed %d times, want 3: a recorded key ran again", got)
			}
		})
	}
}

// TestDisabledUpstreamControlHeaderPassesThroughAndIsRecorded sets
// upstream_control_header to "": the header means nothing to the proxy, so
// the 409 carrying it reaches the client as it is, is recorded, and its
// retry is a replay that carries it too.
func TestDisabledUpstreamControlHeaderPassesThroughAndIsRecorded(t *testing.T) {
	up := startScriptedUpstream(t)
	p := startProxy(t, "control-off", scriptedConfig(t, "memory", up, map[string]string{"upstream_control_header": `""`}))
	c := newClient(t, 15*time.Second)

	first := answer(t, c, p, "order-2", "no-store")
	again := answer(t, c, p, "order-2", "ok")
	for i, r := range []reply{first, again} {
		if got := r.Header.Get("Idempotency-Control"); got != "no-store" {
			t.Errorf("response %d: Idempotency-Control %q, want no-store passed through", i+1, got)
		}
	}
	if first.Status != http.StatusConflict || first.Replayed() {
		t.Fatalf("first: %s, want the upstream's 409", first)
	}
	if !again.Replayed() || again.Status != first.Status || again.Body != first.Body {
		t.Errorf("retry: %s %q, want the replay of %s %q", again, again.Body, first, first.Body)
	}
	if got := up.Execs(); got != 1 {
		t.Errorf("upstream executed %d times, want 1: the response was not recorded", got)
	}
}
