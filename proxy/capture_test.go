package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"strconv"
	"testing"
)

func TestRecordedContentLengthIsTheLengthAsAReplaySendsIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		sent []string // the upstream's Content-Length field
		n    int64
		want string
		kept bool // the upstream's field itself is recorded
	}{
		{"as sent", []string{"200"}, 200, "200", true},
		{"zero", []string{"0"}, 0, "0", true},
		{"leading zero", []string{"0200"}, 200, "200", false},
		{"sign", []string{"+200"}, 200, "200", false},
		{"another length", []string{"199"}, 200, "200", false},
		{"none sent", nil, 200, "200", false},
		{"two sent", []string{"200", "200"}, 200, "200", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &capture{sentLength: slices.Clone(tc.sent)}
			got := c.lengthField(tc.n)
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("Content-Length %q, want [%s]", got, tc.want)
			}
			if kept := len(c.sentLength) > 0 && &got[0] == &c.sentLength[0]; kept != tc.kept {
				t.Errorf("the upstream's field kept: %v, want %v", kept, tc.kept)
			}
		})
	}
}

// Every informational status, 100 to 199 (but 101, which ends the
// exchange), reaches the client as an interim response and is never
// taken for the answer: the final status is what is recorded and
// replayed.
func TestInformationalResponsesAtTheRangesEndsAreNeverRecorded(t *testing.T) {
	for _, code := range []int{http.StatusContinue, 199} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(code)
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "done")
			})
			var interim []int
			trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
				interim = append(interim, code)
				return nil
			}}
			res, err := e.srv.Client().Do(e.request(t, httptrace.WithClientTrace(context.Background(), trace), "/x", "k"))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusCreated || string(body) != "done" || len(interim) != 1 || interim[0] != code {
				t.Fatalf("first: %d %q after interim %v, want %d then the upstream's 201", res.StatusCode, body, interim, code)
			}
			if r := e.do(t, "POST", "/x", "k", "{}"); !r.replayed() || r.StatusCode != http.StatusCreated || r.body != "done" {
				t.Fatalf("retry: %d %q replayed=%v, want the recorded 201", r.StatusCode, r.body, r.replayed())
			}
		})
	}
}
