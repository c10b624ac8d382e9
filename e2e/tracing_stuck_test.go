package e2e

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// The stuck-key runbook (docs/operating.md) goes from the key_hash of a
// refused retry's log line to the trace of the request that holds the key.
// That request has not finished, so its server span is not exported yet;
// its begin span, which took the lease, is — with the same key_hash and the
// trace id of the holder, which the key API shows in the lease.
func TestStuckKeyLeadsToTheTraceOfTheRequestHoldingIt(t *testing.T) {
	col := startCollector(t)
	held, release := make(chan struct{}), make(chan struct{})
	up := newBlockingUpstream(t, held, release)
	var released sync.Once
	unblock := func() { released.Do(func() { close(release) }) }
	t.Cleanup(unblock) // runs before the upstream's Close, which waits for the request
	p := startTracedProxy(t, up, "log_level: debug\nadmin:\n  token: "+stuckToken+"\n"+tracingConfig,
		"OTEL_EXPORTER_OTLP_ENDPOINT="+col.URL(), "OTEL_BSP_SCHEDULE_DELAY=50")
	c := newClient(t, 30*time.Second)

	first := make(chan reply, 1)
	go func() {
		first <- send(t.Context(), c, p.URL(), request{Path: "/v1/charges", Key: "stuck-1",
			Header: map[string]string{"Traceparent": clientTraceparent}})
	}()
	<-held
	if r := mustSend(t, c, p.URL(), request{Path: "/v1/charges", Key: "stuck-1"}); r.Status != http.StatusConflict {
		t.Fatalf("retry while held: %s, want 409", r)
	}

	// 1. The key_hash, from the retry's log line.
	keyHash := loggedKeyHash(t, p.proc.Stderr, "conflict")

	// 2. The span that took the lease, exported while its request still runs.
	begin, ok := col.WaitFor(10*time.Second, func(s collectedSpan) bool {
		return s.GetName() == "idempotency.store.begin" && s.Attr("idempotency.key_hash") == keyHash &&
			s.Attr("idempotency.store.state") == "acquired"
	})
	if !ok {
		t.Fatalf("no acquired begin span with key_hash %s exported while the key was held", keyHash)
	}
	if begin.TraceID() != clientTraceID {
		t.Errorf("the lease was taken in trace %s, want the holder's %s", begin.TraceID(), clientTraceID)
	}
	// The key API names the same trace in the lease.
	req, _ := http.NewRequest("GET", "http://"+p.admin+"/admin/keys/"+keyHash, nil)
	req.Header.Set("Authorization", "Bearer "+stuckToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var lease map[string]any
	err = json.NewDecoder(res.Body).Decode(&lease)
	res.Body.Close()
	if err != nil || lease["state"] != "in_flight" || lease["trace_id"] != clientTraceID {
		t.Errorf("GET /admin/keys/%s = %v, %v; want the lease with trace_id %s", keyHash, lease, err, clientTraceID)
	}
	select {
	case r := <-first:
		t.Fatalf("the holder finished before its trace was found: %s", r)
	default:
	}

	// 3. Once it finishes, its server span completes the trace.
	unblock()
	if r := <-first; r.Err != nil || r.Status != http.StatusCreated {
		t.Fatalf("holder: %s %v", r, r.Err)
	}
	p.Stop(t)
	spans, _ := col.Spans()
	for _, s := range spans {
		if s.GetKind().String() == "SPAN_KIND_SERVER" && s.TraceID() == clientTraceID {
			if s.Attr("idempotency.key_hash") != keyHash || s.Attr("idempotency.outcome") != "executed" {
				t.Errorf("holder's server span: key_hash %q outcome %q, want %s executed",
					s.Attr("idempotency.key_hash"), s.Attr("idempotency.outcome"), keyHash)
			}
			if begin.ParentID() != s.ID() {
				t.Errorf("begin span's parent %s is not the holder's server span %s", begin.ParentID(), s.ID())
			}
			return
		}
	}
	t.Fatalf("no server span in the holder's trace %s", clientTraceID)
}

const stuckToken = "stuck-token"

// newBlockingUpstream answers 201 once release is closed; held is closed
// when the first request arrives.
func newBlockingUpstream(t *testing.T, held, release chan struct{}) string {
	t.Helper()
	var arrived sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Do(func() { close(held) })
		<-release
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
