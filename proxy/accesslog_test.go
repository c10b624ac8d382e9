package proxy

import (
	"fmt"
	"net/http"
	"testing"
)

func withAccessLog(o *Options) { o.AccessLog = true }

// With the access log on, every request — executed, replayed, refused,
// passed through — has one info line with what an operator needs: the
// path without its query, the status and bytes the client got, the outcome
// and the key_hash. Without it, none.
func TestAccessLogHasOneLinePerRequest(t *testing.T) {
	var logs lockedBuffer
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("created"))
	}, withLog(&logs), withAccessLog, func(o *Options) {
		o.Routes = []Route{{Pattern: "POST /v1/charges", Policy: DefaultPolicy()}}
	})
	e.do(t, "POST", "/v1/charges?token=secret", "k", "{}")
	e.do(t, "POST", "/v1/charges?token=secret", "k", "{}")
	e.do(t, "POST", "/v1/charges", "k", `{"other":1}`)
	e.do(t, "GET", "/v1/charges", "", "")
	hash := e.keyHash(t, "k")
	want := []string{
		"POST /v1/charges POST /v1/charges 201 executed 7 " + hash,
		"POST /v1/charges POST /v1/charges 201 replayed 7 " + hash,
		"POST /v1/charges POST /v1/charges 422 mismatch -1 " + hash,
		"GET /v1/charges default 201 passthrough 7 ",
	}
	lines := logs.lines(t, "access")
	if len(lines) != len(want) {
		t.Fatalf("%d access lines, want %d: %v", len(lines), len(want), lines)
	}
	for i, l := range lines {
		bytes := l["bytes"].(float64)
		if l["outcome"] == string(OutcomeMismatch) && bytes > 0 {
			bytes = -1 // some bytes of problem+json; their number is the text's business
		}
		got := fmt.Sprintf("%v %v %v %v %v %v %v", l["method"], l["path"], l["route"], l["status"], l["outcome"], bytes, l["key_hash"])
		if got != want[i] {
			t.Errorf("access line %d: %s\nwant %s", i, got, want[i])
		}
		if l["level"] != "INFO" || l["duration_seconds"] == nil {
			t.Errorf("access line %d: level %v, duration %v; want INFO and a duration", i, l["level"], l["duration_seconds"])
		}
	}
	if lines := logs.lines(t, "request"); len(lines) != 3 || lines[0]["path"] != "/v1/charges" {
		t.Errorf("debug request lines %v, want 3 with the path", lines)
	}

	var quiet lockedBuffer
	off := newEnv(t, nil, withLog(&quiet))
	off.do(t, "POST", "/x", "k", "{}")
	if lines := quiet.lines(t, "access"); len(lines) != 0 {
		t.Errorf("access log off: %d access lines", len(lines))
	}
	off.handler.SetAccessLog(true)
	off.do(t, "POST", "/x", "k", "{}")
	if lines := quiet.lines(t, "access"); len(lines) != 1 || lines[0]["outcome"] != string(OutcomeReplayed) {
		t.Errorf("access log turned on: lines %v, want the replay's", lines)
	}
}

// The status in the access line is the one the client was sent, for an
// answer without a body as for any other: a pass-through carries no status
// of the proxy's own to fall back on.
func TestAccessLineStatusIsTheOneSentWhenNoBodyFollows(t *testing.T) {
	var logs lockedBuffer
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	}, withLog(&logs), withAccessLog)
	e.do(t, "GET", "/v1/charges", "", "")
	lines := logs.lines(t, "access")
	if len(lines) != 1 {
		t.Fatalf("%d access lines, want 1: %v", len(lines), lines)
	}
	if l := lines[0]; l["status"] != float64(http.StatusOK) || l["bytes"] != float64(0) || l["outcome"] != string(OutcomePassthrough) {
		t.Errorf("access line status %v, bytes %v, outcome %v; want 200, 0, passthrough", l["status"], l["bytes"], l["outcome"])
	}
}
