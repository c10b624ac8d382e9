package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestBodiesReadTwoWaysAreRefused runs the built binary with a canonical
// fingerprint on one route and a json:/id key on another, and sends the
// bodies a Go, Python or JavaScript upstream reads otherwise than a reader
// that keeps the first of a repeated name: each is answered 400
// ambiguous-body, counted as ambiguous, with nothing forwarded and nothing
// locked.
func TestBodiesReadTwoWaysAreRefused(t *testing.T) {
	up := startUpstream(t)
	p := startProxy(t, "ambiguous-body", proxyConfig{
		Upstream: up.URL(),
		Memory:   true,
		Routes: []routeConfig{
			{Match: "POST /v1/charges", Keys: map[string]string{"fingerprint_json": "canonical"}},
			{Match: "POST /v1/orders", Keys: map[string]string{"key_sources": `["json:/id"]`, "require_key": "true"}},
		},
	})
	c := newClient(t, 10*time.Second)
	ctx := context.Background()
	refused := func(what string, rq request) {
		t.Helper()
		if r := send(ctx, c, p.URL(), rq); r.Err != nil || r.Status != http.StatusBadRequest || r.Problem() != "ambiguous-body" {
			t.Errorf("%s: %s %v, want 400 ambiguous-body", what, r, r.Err)
		}
	}
	// Amounts 2 and 1 to a Go upstream, one canonical form to a reader
	// that folds neither case nor order.
	refused("amount, Amount", request{Path: "/v1/charges", Key: "ch-1", Body: `{"amount":1,"Amount":2}`})
	refused("Amount, amount", request{Path: "/v1/charges", Key: "ch-1", Body: `{"Amount":2,"amount":1}`})
	// ord_9 to Go, Python and JavaScript; ord_7 to a Go upstream.
	refused("id twice", request{Path: "/v1/orders", Body: `{"id":"ord_1","id":"ord_9"}`})
	refused("id and ID", request{Path: "/v1/orders", Body: `{"id":"ord_5","ID":"ord_7"}`})
	if n := up.Total(); n != 0 {
		t.Fatalf("upstream executed %d requests, want 0", n)
	}
	if got := metricSum(t, mRequests, map[string]string{"outcome": "ambiguous"}, p); got != 4 {
		t.Errorf(`requests_total{outcome="ambiguous"} = %v, want 4`, got)
	}
	// Nothing was locked: the key and the ids serve bodies that mean one thing.
	if r := send(ctx, c, p.URL(), request{Path: "/v1/charges", Key: "ch-1", Body: `{"amount":2}`}); r.Status != http.StatusCreated || r.Replayed() {
		t.Errorf("ch-1 afterwards: %s, want executed", r)
	}
	for _, id := range []string{"ord_1", "ord_9", "ord_5", "ord_7"} {
		body := `{"id":"` + id + `"}`
		first := send(ctx, c, p.URL(), request{Path: "/v1/orders", Body: body})
		again := send(ctx, c, p.URL(), request{Path: "/v1/orders", Body: body})
		if first.Status != http.StatusCreated || !again.Replayed() {
			t.Errorf("%s afterwards: %s then %s, want executed then replayed", id, first, again)
		}
	}
	if n := up.Total(); n != 5 {
		t.Errorf("upstream executed %d requests, want 5", n)
	}
}

// TestJSONIntegerKeysAreOnlyThoseJavaScriptReadsExactly runs the built
// binary with a json:/id key on a require_key route: 9007199254740993 and
// 9007199254740992 are one number to Node's JSON.parse, so neither is a
// key (400 missing-key, nothing forwarded), while 2^53 - 1, the largest
// integer JavaScript holds exactly, is one: executed once, then replayed.
func TestJSONIntegerKeysAreOnlyThoseJavaScriptReadsExactly(t *testing.T) {
	up := startUpstream(t)
	p := startProxy(t, "json-integers", proxyConfig{
		Upstream: up.URL(),
		Memory:   true,
		Routes: []routeConfig{
			{Match: "POST /v1/orders", Keys: map[string]string{"key_sources": `["json:/id"]`, "require_key": "true"}},
		},
	})
	c := newClient(t, 10*time.Second)
	ctx := context.Background()
	for _, id := range []string{"9007199254740993", "9007199254740992", "-9007199254740993", "9223372036854775807"} {
		if r := send(ctx, c, p.URL(), request{Path: "/v1/orders", Body: `{"id":` + id + `}`}); r.Err != nil || r.Status != http.StatusBadRequest || r.Problem() != "missing-key" {
			t.Errorf("id %s: %s %v, want 400 missing-key", id, r, r.Err)
		}
	}
	if n := up.Total(); n != 0 {
		t.Fatalf("upstream executed %d requests keyed by integers JavaScript reads as others, want 0", n)
	}
	body := `{"id":9007199254740991}`
	first := send(ctx, c, p.URL(), request{Path: "/v1/orders", Body: body})
	again := send(ctx, c, p.URL(), request{Path: "/v1/orders", Body: body})
	if first.Status != http.StatusCreated || first.Replayed() || !again.Replayed() || again.Body != first.Body {
		t.Errorf("2^53 - 1: %s then %s, want executed then replayed", first, again)
	}
	if n := up.Total(); n != 1 {
		t.Errorf("upstream executed %d requests, want 1", n)
	}
}

// TestBodyWithAByteOrderMarkIsAnotherBody runs the built binary with a
// canonical fingerprint in front of an upstream that reads JSON as Go's
// encoding/json does, and so refuses a body behind a UTF-8 byte order
// mark with 400. The valid retry of that body without the mark, under the
// same key, is another request (422 payload-mismatch), never the replay of
// the 400; the body with the mark sent again is replayed.
func TestBodyWithAByteOrderMarkIsAnotherBody(t *testing.T) {
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	p := startProxy(t, "bom", proxyConfig{
		Upstream: up.URL,
		Memory:   true,
		Routes:   []routeConfig{{Match: "POST /v1/charges", Keys: map[string]string{"fingerprint_json": "canonical"}}},
	})
	c := newClient(t, 10*time.Second)
	ctx := context.Background()
	marked := request{Path: "/v1/charges", Key: "bom-1", Body: "\xef\xbb\xbf{\"amount\":1}"}
	if r := send(ctx, c, p.URL(), marked); r.Status != http.StatusBadRequest || r.Replayed() {
		t.Fatalf("the body with a byte order mark: %s, want the upstream's 400", r)
	}
	if r := send(ctx, c, p.URL(), marked); r.Status != http.StatusBadRequest || !r.Replayed() {
		t.Errorf("the same body again: %s, want its 400 replayed", r)
	}
	plain := request{Path: "/v1/charges", Key: "bom-1", Body: `{"amount":1}`}
	if r := send(ctx, c, p.URL(), plain); r.Status != http.StatusUnprocessableEntity || r.Problem() != "payload-mismatch" {
		t.Errorf("the body without the mark, same key: %s, want 422 payload-mismatch, not the 400 replayed", r)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("upstream called %d times, want 1", n)
	}
}
