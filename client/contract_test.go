package client

import (
	"errors"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/contract"
)

var actionNames = map[action]string{done: contract.Done, retry: contract.Retry, stop: contract.Stop}

// answer is a response with status, an optional problem+json type and
// headers, as classify sees it.
func answer(status int, problemType string, header ...string) *http.Response {
	resp := &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(""))}
	if problemType != "" {
		resp.Header.Set("Content-Type", "application/problem+json")
		resp.Body = io.NopCloser(strings.NewReader(`{"type":"` + problemType + `","status":0}`))
	}
	for i := 0; i+1 < len(header); i += 2 {
		resp.Header.Set(header[i], header[i+1])
	}
	return resp
}

// The client decides every answer as clients/contract.json does: each of
// the proxy's problem types, with its typed error, and every other status,
// replays included.
func TestClientFollowsTheContract(t *testing.T) {
	c, err := contract.Load(".")
	if err != nil {
		t.Fatal(err)
	}
	if c.ProblemBase != problemBase {
		t.Errorf("problem base %q, contract says %q", problemBase, c.ProblemBase)
	}
	if c.AcceptedAsync.ReleasedHeader != HeaderReleased {
		t.Errorf("HeaderReleased %q, contract says %q", HeaderReleased, c.AcceptedAsync.ReleasedHeader)
	}
	var proxyTypes []string
	for _, row := range c.Problems {
		if !row.On(contract.ListenerProxy) {
			continue
		}
		uri := c.ProblemBase + row.Type
		proxyTypes = append(proxyTypes, uri)
		t.Run(row.Type, func(t *testing.T) {
			r := attemptResult{resp: answer(row.Status, uri, "Retry-After", "1")}
			r.classify(nil)
			if got := actionNames[r.action]; got != row.Client {
				t.Fatalf("%d %s: action %s, contract says %s", row.Status, row.Type, got, row.Client)
			}
			if row.Client == contract.Retry && (!r.hasRetryAfter || r.retryAfter.Seconds() != 1) {
				t.Errorf("%d %s: Retry-After not honoured", row.Status, row.Type)
			}
			if row.Client != contract.Stop {
				return
			}
			_, err := r.deliver("k")
			var pe *ProblemError
			var me *MismatchError
			switch row.Error {
			case "payload-mismatch":
				if !errors.As(err, &me) || !errors.Is(err, ErrKeyReused) {
					t.Errorf("error %v, want a *MismatchError", err)
				}
			case "key-expired":
				if !errors.As(err, &pe) || !errors.Is(err, ErrKeyExpired) {
					t.Errorf("error %v, want a *ProblemError wrapping ErrKeyExpired", err)
				}
			case "":
				if !errors.As(err, &pe) || pe.Problem.Type != uri || pe.StatusCode != row.Status {
					t.Errorf("error %v, want a *ProblemError for %d %s", err, row.Status, row.Type)
				}
			default:
				t.Errorf("contract names error %q this test does not know", row.Error)
			}
			// A replay of the same answer is the recorded outcome: done.
			replay := attemptResult{resp: answer(row.Status, uri, HeaderReplayed, "true")}
			if replay.classify(nil); replay.action != done {
				t.Errorf("replayed %d %s: action %s, want done", row.Status, row.Type, actionNames[replay.action])
			}
		})
	}
	slices.Sort(proxyTypes)
	if got := slices.Sorted(maps.Keys(problemActions)); !slices.Equal(got, proxyTypes) {
		t.Errorf("problemActions decides %q, contract lists %q", got, proxyTypes)
	}
	t.Run("other answers", func(t *testing.T) {
		for status := 200; status < 600; status++ {
			for _, replayed := range []bool{false, true} {
				h := []string{}
				if replayed {
					h = []string{HeaderReplayed, "true"}
				}
				r := attemptResult{resp: answer(status, "https://api.example/problems/x", h...)}
				r.classify(nil)
				if got, want := actionNames[r.action], c.Action(status, replayed); got != want {
					t.Errorf("status %d replayed %v: action %s, contract says %s", status, replayed, got, want)
				}
			}
		}
	})
	if c.NetworkError != contract.Retry || c.AttemptTimeout != contract.Retry {
		t.Errorf("contract says %s on a network error and %s on an attempt timeout; the client retries both", c.NetworkError, c.AttemptTimeout)
	}
}
