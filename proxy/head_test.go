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
