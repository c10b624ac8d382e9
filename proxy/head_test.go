package proxy

import (
	"net/http"
	"testing"
)

// A HEAD response announces the length a GET would send; a route that
// protects HEAD must replay that announcement, not the length of the
// (always empty) body it captured.
func TestReplayedHeadAnnouncesTheRecordedLength(t *testing.T) {
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1234")
		w.WriteHeader(http.StatusOK)
	}, withPolicy(func(p *Policy) { p.Methods = append(p.Methods, http.MethodHead) }))
	first := e.do(t, http.MethodHead, "/x", "k", "")
	again := e.do(t, http.MethodHead, "/x", "k", "")
	if !again.replayed() || e.up.calls.Load() != 1 {
		t.Fatalf("replayed=%v executions=%d, want one execution and a replay", again.replayed(), e.up.calls.Load())
	}
	if got, want := again.Header.Get("Content-Length"), first.Header.Get("Content-Length"); got != want {
		t.Fatalf("replayed HEAD Content-Length = %q, want the recorded %q", got, want)
	}
}

// A HEAD response carries no body, so however large the length it
// announces, nothing is left out of its record: the replay announces the
// same length, and does not say a body was omitted.
func TestReplayedHeadAnnouncesALengthOverTheRecordLimit(t *testing.T) {
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1048576")
		w.WriteHeader(http.StatusOK)
	}, withPolicy(func(p *Policy) {
		p.Methods = append(p.Methods, http.MethodHead)
		p.MaxResponseBody = 1024
	}))
	first := e.do(t, http.MethodHead, "/x", "k", "")
	again := e.do(t, http.MethodHead, "/x", "k", "")
	if !again.replayed() || e.up.calls.Load() != 1 {
		t.Fatalf("replayed=%v executions=%d, want one execution and a replay", again.replayed(), e.up.calls.Load())
	}
	if got, want := again.Header.Get("Content-Length"), first.Header.Get("Content-Length"); got != want || want != "1048576" {
		t.Errorf("replayed HEAD Content-Length = %q, want the upstream's %q", got, want)
	}
	if v := again.Header.Get("Idempotent-Body-Omitted"); v != "" {
		t.Errorf("replayed HEAD says Idempotent-Body-Omitted: %s; a HEAD response has no body to omit", v)
	}
}

// A HEAD runs the GET handler on Go's ServeMux, Express, Rails and Spring:
// a route that protects GET protects HEAD, its key rules and its one
// execution included.
func TestHeadIsProtectedWhereGetIs(t *testing.T) {
	legacy := DefaultPolicy()
	legacy.Methods = []string{http.MethodGet}
	legacy.RequireKey = true
	e := newEnv(t, nil, func(o *Options) { o.Routes = []Route{{Pattern: "GET /v1/legacy", Policy: legacy}} })
	if r := e.do(t, http.MethodHead, "/v1/legacy", "", ""); r.StatusCode != http.StatusBadRequest {
		t.Errorf("a keyless HEAD: %d, want 400 missing-key", r.StatusCode)
	}
	for range 2 {
		e.do(t, http.MethodHead, "/v1/legacy", "h-1", "")
	}
	if got := e.up.calls.Load(); got != 1 {
		t.Errorf("a keyed HEAD sent twice: executions = %d, want 1", got)
	}
	// The GET of the key is another request: a mismatch, never the
	// HEAD's bodiless answer.
	if r := e.do(t, http.MethodGet, "/v1/legacy", "h-1", ""); r.problemType() != "payload-mismatch" {
		t.Errorf("a GET under a HEAD's key: %d %q, want payload-mismatch", r.StatusCode, r.problemType())
	}
}

// A HEAD answered without a length (a GET that would stream its body) is
// replayed without one, and one answered with a length of 0 with that 0:
// a replay never announces an empty body the upstream did not.
func TestReplayedHeadAnnouncesNoLengthWhereNoneCame(t *testing.T) {
	for _, length := range []string{"", "0"} {
		t.Run("Content-Length "+length, func(t *testing.T) {
			e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
				if length != "" {
					w.Header().Set("Content-Length", length)
				}
				w.WriteHeader(http.StatusOK)
			}, withPolicy(func(p *Policy) { p.Methods = append(p.Methods, http.MethodGet) }))
			first := e.do(t, http.MethodHead, "/x", "k", "")
			again := e.do(t, http.MethodHead, "/x", "k", "")
			if !again.replayed() || e.up.calls.Load() != 1 {
				t.Fatalf("replayed=%v executions=%d, want one execution and a replay", again.replayed(), e.up.calls.Load())
			}
			if got, want := again.Header.Values("Content-Length"), first.Header.Values("Content-Length"); len(got) != len(want) || len(want) > 0 && got[0] != want[0] || first.Header.Get("Content-Length") != length {
				t.Fatalf("Content-Length: first %q, replay %q; want the upstream's %q both times", want, got, length)
			}
		})
	}
}
