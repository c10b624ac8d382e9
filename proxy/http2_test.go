package proxy

import (
	"io"
	"net/http"
	"testing"
)

// Everything a client gets over HTTP/1.1 it gets over HTTP/2 (h2c, prior
// knowledge): these tests run again with the client speaking HTTP/2 to the
// proxy — replays, refusals, detached calls, 1xx and the control header,
// hop-by-hop fields never recorded, trailers recorded and replayed,
// responses streamed while recorded, cut short, too large.
func TestEverythingOverHTTP2(t *testing.T) {
	envOverH2C = true
	t.Cleanup(func() { envOverH2C = false })
	for name, test := range map[string]func(*testing.T){
		"FirstRequestExecutesOnceAndIsReplayed":                 TestFirstRequestExecutesOnceAndIsReplayed,
		"FingerprintMismatch":                                   TestFingerprintMismatch,
		"RequestBodyTooLarge":                                   TestRequestBodyTooLarge,
		"ConcurrentDuplicatesReject":                            TestConcurrentDuplicatesReject,
		"SlowUpstreamIsWaitedFor":                               TestSlowUpstreamIsWaitedFor,
		"ClientDisconnectDetaches":                              TestClientDisconnectDetaches,
		"TimeoutDuringBodyRecordsWholeAnswer":                   TestTimeoutDuringBodyRecordsWholeAnswer,
		"ControlHeaderIsRemovedFromInterimResponsesAndTrailers": TestControlHeaderIsRemovedFromInterimResponsesAndTrailers,
		"ControlHeaderSentAsUnannouncedTrailerIsRemoved":        TestControlHeaderSentAsUnannouncedTrailerIsRemoved,
		"RequestTrailersReachTheUpstream":                       TestRequestTrailersReachTheUpstream,
		"ResponseTrailersAreRecordedAndReplayed":                TestResponseTrailersAreRecordedAndReplayed,
		"ResponsesGainNoContentTypeTheUpstreamDidNotSend":       TestResponsesGainNoContentTypeTheUpstreamDidNotSend,
	} {
		t.Run(name, test)
	}
}

// An upstream's trailers, announced or not, are recorded with its
// response and replayed after the body, without the control header; the
// replay has no Content-Length, so that over HTTP/1.1 it is chunked and
// its trailers go out.
func TestResponseTrailersAreRecordedAndReplayed(t *testing.T) {
	runs := 0
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		runs++
		h := w.Header()
		h.Set("Trailer", "X-Checksum")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "done")
		h.Set("X-Checksum", "c1")
		h.Set(http.TrailerPrefix+"X-Signature", "s1")
		h.Set(http.TrailerPrefix+"Idempotency-Control", "no-store")
	})
	first := e.do(t, "POST", "/jobs", "k", `{}`)
	second := e.do(t, "POST", "/jobs", "k", `{}`)
	for name, r := range map[string]*response{"executed": first, "replayed": second} {
		if r.StatusCode != http.StatusCreated || r.body != "done" {
			t.Errorf("%s: %d %q, want 201 done", name, r.StatusCode, r.body)
		}
		if r.Trailer.Get("X-Checksum") != "c1" || r.Trailer.Get("X-Signature") != "s1" {
			t.Errorf("%s: trailers %v, want X-Checksum: c1 and X-Signature: s1", name, r.Trailer)
		}
		if _, ok := r.Trailer["Idempotency-Control"]; ok {
			t.Errorf("%s: trailers carry the control header", name)
		}
	}
	if !second.replayed() || runs != 1 {
		t.Fatalf("replayed %v after %d runs, want the recorded response after 1", second.replayed(), runs)
	}
}
