package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution/executiontest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// ledger is an upstream that commits each charge to its ledger before it
// answers, and can die after the commit (it closes the connection): the
// answer is lost, the effect is not. It answers lookups from the ledger.
type ledger struct {
	mu       sync.Mutex
	charges  map[string]string // key → the charge's id
	effects  int
	die      int // commits that die before answering, still to come
	lookups  int
	lookup   func(w http.ResponseWriter, r *http.Request) bool // answers a lookup itself when it returns true
	noCommit bool                                              // die before committing
	probes   []*http.Request
	// lookupsUp is for lookup funcs that fail until it is set.
	lookupsUp bool
}

func (l *ledger) up() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lookupsUp
}

func (l *ledger) handler(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.Method == http.MethodGet {
		l.mu.Lock()
		l.lookups++
		l.probes = append(l.probes, r)
		f := l.lookup
		id, ok := l.charges[r.URL.Query().Get("idempotency_key")]
		l.mu.Unlock()
		if f != nil && f(w, r) {
			return
		}
		if !ok {
			http.Error(w, `{"error":"no such charge"}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":%q,"status":"succeeded"}`, id)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	l.mu.Lock()
	die := l.die > 0
	if die {
		l.die--
	}
	commit := !(die && l.noCommit)
	id := fmt.Sprintf("ch_%d", l.effects+1)
	if commit {
		l.effects++
		l.charges[key] = id
	}
	l.mu.Unlock()
	_ = body
	if die {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":%q,"status":"succeeded"}`, id)
}

func (l *ledger) count() (effects, lookups int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.effects, l.lookups
}

func reconcileEnv(t *testing.T, l *ledger, f func(*Policy), opts ...envOption) *env {
	t.Helper()
	if l.charges == nil {
		l.charges = map[string]string{}
	}
	return newEnv(t, l.handler, append([]envOption{func(o *Options) {
		o.UpstreamTimeout = 10 * time.Second
		p := &o.Default
		p.OnUpstreamError = UpstreamErrorReconcile
		p.Reconcile.Request = "GET /v1/charges?idempotency_key={key}"
		p.Reconcile.After, p.Reconcile.Every = time.Millisecond, 100*time.Millisecond
		if f != nil {
			f(p)
		}
	}}, opts...)...)
}

func (e *env) probes(result string) float64 {
	return testutil.ToFloat64(e.handler.metrics.probes.WithLabelValues("default", result))
}

func TestLostAnswerOfACommittedRequestIsTheUpstreamsRecordedAnswer(t *testing.T) {
	l := &ledger{}
	e := reconcileEnv(t, l, nil)
	if r := e.do(t, "POST", "/v1/charges", "known", `{}`); r.StatusCode != http.StatusCreated {
		t.Fatalf("a charge that answered: %d %s", r.StatusCode, r.body)
	}
	l.mu.Lock()
	l.die = 1
	l.mu.Unlock()
	if _, lookups := l.count(); lookups != 0 {
		t.Fatalf("%d lookups for a charge whose outcome is known, want none", lookups)
	}
	first := e.do(t, "POST", "/v1/charges", "k1", `{"amount":5}`, "Authorization", "Bearer c1", "X-Card", "4242")
	if first.StatusCode != http.StatusOK || !strings.Contains(first.body, `"ch_2"`) {
		t.Fatalf("first caller: %d %s, want the found charge", first.StatusCode, first.body)
	}
	if first.Header.Get(IdempotencyReconciled) != "true" || !first.replayed() {
		t.Errorf("first caller's headers %v: want Idempotent-Replayed and Idempotency-Reconciled", first.Header)
	}
	retry := e.do(t, "POST", "/v1/charges", "k1", `{"amount":5}`, "Authorization", "Bearer c1")
	if retry.body != first.body || retry.StatusCode != first.StatusCode || retry.Header.Get(IdempotencyReconciled) != "true" {
		t.Errorf("retry: %d %s, want the first caller's %d %s", retry.StatusCode, retry.body, first.StatusCode, first.body)
	}
	if effects, _ := l.count(); effects != 2 {
		t.Errorf("effects on the ledger = %d, want 2 (one a key)", effects)
	}
	if got := e.outcomes("default", OutcomeReconciledFound); got != 1 {
		t.Errorf("reconciled_found = %v, want 1", got)
	}
	if _, lookups := l.count(); lookups != 1 {
		t.Errorf("%d lookups, want 1", lookups)
	}
	if got := e.probes(probeFound); got != 1 {
		t.Errorf("probes found = %v, want 1", got)
	}
	l.mu.Lock()
	p := l.probes[0]
	l.mu.Unlock()
	// The scope header goes with the lookup (its default headers); the
	// rest of the request, its body included, does not.
	if p.Header.Get("Authorization") != "Bearer c1" || p.Header.Get("X-Card") != "" || p.Header.Get("Content-Type") != "" || p.ContentLength > 0 {
		t.Errorf("lookup carried %v and %d body bytes, want Authorization alone", p.Header, p.ContentLength)
	}
	if got := p.URL.RawQuery; got != "idempotency_key=k1" {
		t.Errorf("lookup query %q, want idempotency_key=k1", got)
	}
}

// A lookup that does not answer is cut at its own deadline (every),
// counted as an error, and asked again until one answers.
func TestLookupThatHangsIsCutAtItsDeadlineAndAskedAgain(t *testing.T) {
	hang := make(chan struct{})
	l := &ledger{die: 1}
	l.lookup = func(w http.ResponseWriter, r *http.Request) bool {
		select {
		case <-hang:
			return false // answered from the ledger
		case <-r.Context().Done():
			return true
		}
	}
	e := reconcileEnv(t, l, func(p *Policy) { p.Reconcile.Every = 200 * time.Millisecond })
	done := make(chan *response, 1)
	go func() { done <- e.do(t, "POST", "/v1/charges", "k1", `{}`) }()
	waitFor(t, func() bool { return e.probes(probeError) >= 2 })
	close(hang)
	if r := <-done; r.StatusCode != http.StatusOK || !strings.Contains(r.body, `"ch_1"`) {
		t.Fatalf("got %d %s, want the charge once a lookup answered", r.StatusCode, r.body)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if !cond() {
			return fmt.Errorf("not yet")
		}
		return nil
	})
}

func TestProbeTemplateFill(t *testing.T) {
	r, _ := http.NewRequest("POST", "http://x/v1/a%2Fb/charges?ref=r+1&ref2=", nil)
	r.Header.Set("X-Order", "o/1 2")
	body := []byte(`{"order":{"id":"ord 7"},"n":42}`)
	for _, tt := range []struct{ tmpl, want, hole string }{
		{"GET /v1/charges?idempotency_key={key}", "/v1/charges?idempotency_key=k+%26%3D1", ""},
		{"GET /v1/keys/{key}", "/v1/keys/k%20&=1", ""},
		{"GET /v1/orders/{json:/order/id}?n={json:/n}", "/v1/orders/ord%207?n=42", ""},
		{"GET /v1/orders/{header:x-order}", "", "/ or \\"},
		{"GET /v1/orders?id={header:x-order}", "/v1/orders?id=o%2F1+2", ""},
		{"GET /v1/refs/{query:ref}", "/v1/refs/r%201", ""},
		{"GET {path}/status?of={path}", "/v1/a%2Fb/charges/status?of=%2Fv1%2Fa%2Fb%2Fcharges", ""},
		{"GET /v1/orders/{json:/missing}", "", "/missing"},
		{"GET /v1/orders/{header:X-Absent}", "", "X-Absent"},
		{"GET /v1/refs/{query:ref2}", "", "ref2"},
	} {
		p, err := parseProbeTemplate(tt.tmpl)
		if err != nil {
			t.Fatalf("%s: %v", tt.tmpl, err)
		}
		got, err := p.fill(r, "k &=1", body)
		switch {
		case tt.hole != "" && (err == nil || !strings.Contains(err.Error(), tt.hole)):
			t.Errorf("%s: %q, %v; want a hole naming %s", tt.tmpl, got, err, tt.hole)
		case tt.hole == "" && (err != nil || got != tt.want):
			t.Errorf("%s = %q, %v; want %q", tt.tmpl, got, err, tt.want)
		}
	}
}

func TestAbsentOutcomeIsResentOnce(t *testing.T) {
	l := &ledger{die: 1, noCommit: true}
	e := reconcileEnv(t, l, func(p *Policy) { p.Reconcile.Resend = true })
	first := e.do(t, "POST", "/v1/charges", "k1", `{"amount":5}`)
	if first.StatusCode != http.StatusCreated || !strings.Contains(first.body, `"ch_1"`) {
		t.Fatalf("first caller: %d %s, want the resent request's answer", first.StatusCode, first.body)
	}
	retry := e.do(t, "POST", "/v1/charges", "k1", `{"amount":5}`)
	if retry.body != first.body || !retry.replayed() {
		t.Errorf("retry: %d %s, want a replay of %s", retry.StatusCode, retry.body, first.body)
	}
	if effects, _ := l.count(); effects != 1 {
		t.Errorf("effects on the ledger = %d, want 1", effects)
	}
	// Resent after the first absent answer: its marker rewritten at once,
	// never left deleted until a later lookup.
	if got := e.probes(probeAbsent) + e.probes(probeUnknown) + e.probes(probeError); got != 1 {
		t.Errorf("lookups = %v, want 1: the key is resent on the first absent answer", got)
	}
}

// A resend answered with a release status (503, 429: "not processed, try
// again") settles the key as absent, as that answer settles an original
// request: the key is released and the client's retry executes it. It is
// not left to a lookup that, after a resend, can only end in
// reconcile.then — under keep a 502 recorded for a charge that never
// happened, and the client, told its outcome is unknown, never charged.
func TestResendAnsweredNotProcessedReleasesTheKey(t *testing.T) {
	var posts atomic.Int32
	l := &ledger{charges: map[string]string{}}
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			switch posts.Add(1) {
			case 1: // lost before its commit: absent
				hangUp(w)
				return
			case 2: // the resend: not processed
				w.Header().Set("Retry-After", "1")
				http.Error(w, "overloaded", http.StatusServiceUnavailable)
				return
			}
		}
		l.handler(w, r)
	}
	e := newEnv(t, handler, func(o *Options) {
		o.UpstreamTimeout = 10 * time.Second
		p := &o.Default
		p.OnUpstreamError = UpstreamErrorReconcile
		p.Reconcile.Request = "GET /v1/charges?idempotency_key={key}"
		p.Reconcile.After, p.Reconcile.Every = time.Millisecond, 20*time.Millisecond
		p.Reconcile.Resend = true
	})
	first := e.do(t, "POST", "/v1/charges", "k1", `{"amount":5}`)
	if first.StatusCode != http.StatusBadGateway || !strings.Contains(first.body, "released") {
		t.Fatalf("first caller: %d %s, want the 502 saying the key is released", first.StatusCode, first.body)
	}
	retry := e.do(t, "POST", "/v1/charges", "k1", `{"amount":5}`)
	if retry.StatusCode != http.StatusCreated || retry.replayed() {
		t.Errorf("retry: %d %s, want it executed: 201", retry.StatusCode, retry.body)
	}
	if effects, _ := l.count(); effects != 1 {
		t.Errorf("effects on the ledger = %d, want 1", effects)
	}
	if got := e.outcomes("default", OutcomeReconciledAbsent); got != 1 {
		t.Errorf("reconciled_absent = %v, want 1", got)
	}
}

func TestAbsentOutcomeWithoutResendReleasesTheKey(t *testing.T) {
	l := &ledger{die: 1, noCommit: true}
	e := reconcileEnv(t, l, nil)
	first := e.do(t, "POST", "/v1/charges", "k1", `{}`)
	if first.StatusCode != http.StatusBadGateway || !strings.Contains(first.body, "did not take effect") {
		t.Fatalf("first caller: %d %s, want 502 saying it did not take effect", first.StatusCode, first.body)
	}
	retry := e.do(t, "POST", "/v1/charges", "k1", `{}`)
	if retry.StatusCode != http.StatusCreated || retry.replayed() {
		t.Fatalf("retry: %d %s, want an execution", retry.StatusCode, retry.body)
	}
	if effects, _ := l.count(); effects != 1 {
		t.Errorf("effects = %d, want 1", effects)
	}
}

func TestLookupPlaceholderTheRequestCannotFillIsRefusedBeforeForwarding(t *testing.T) {
	l := &ledger{}
	e := reconcileEnv(t, l, func(p *Policy) { p.Reconcile.Request = "GET /v1/orders/{json:/order_id}" })
	r := e.do(t, "POST", "/v1/charges", "k1", `{"amount":5}`)
	if r.StatusCode != http.StatusBadRequest || r.problemType() != "missing-key" || !strings.Contains(r.body, "/order_id") {
		t.Fatalf("got %d %s, want 400 naming /order_id", r.StatusCode, r.body)
	}
	if effects, lookups := l.count(); effects != 0 || lookups != 0 {
		t.Errorf("effects %d lookups %d, want none", effects, lookups)
	}
}

// A value holding a / or a \ in the lookup's path is read two ways: as
// one segment (%2F) by some upstreams, as two by those that decode the
// path before routing it (every WSGI server, so Flask and Django; nginx
// in front with a URI in proxy_pass). There the lookup of
// "/v1/orders/INV%2F2024%2F7" asks for another resource, whose 404 would
// be taken for absent and the charge resent. The request is refused, as
// a request whose own path holds %2F or %5C is, before anything is
// locked or sent; in the lookup's query the value is unambiguous.
func TestLookupPathValueReadTwoWaysIsRefusedBeforeForwarding(t *testing.T) {
	for _, id := range []string{"INV/2024/7", `INV\\2024`, "a/..", "../admin"} {
		l := &ledger{}
		e := reconcileEnv(t, l, func(p *Policy) { p.Reconcile.Request = "GET /v1/orders/{json:/order_id}" })
		r := e.do(t, "POST", "/v1/charges", "k1", `{"order_id":"`+id+`"}`)
		if r.StatusCode != http.StatusBadRequest || r.problemType() != "missing-key" || !strings.Contains(r.body, "lookup's path") {
			t.Errorf("order_id %s: got %d %s, want 400 saying the lookup's path cannot hold it", id, r.StatusCode, r.body)
		}
		if effects, lookups := l.count(); effects != 0 || lookups != 0 {
			t.Errorf("order_id %s: effects %d lookups %d, want none", id, effects, lookups)
		}
	}
	l := &ledger{}
	e := reconcileEnv(t, l, func(p *Policy) { p.Reconcile.Request = "GET /v1/orders?id={json:/order_id}" })
	if r := e.do(t, "POST", "/v1/charges", "k1", `{"order_id":"INV/2024/7"}`); r.StatusCode != http.StatusCreated {
		t.Errorf("order_id in the lookup's query: got %d %s, want it forwarded", r.StatusCode, r.body)
	}
}

func TestAmbiguousStatusIsSettledByTheLookup(t *testing.T) {
	l := &ledger{charges: map[string]string{}}
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			l.mu.Lock()
			l.effects++
			l.charges[r.Header.Get("Idempotency-Key")] = "ch_1"
			l.mu.Unlock()
			http.Error(w, "bad gateway", http.StatusBadGateway) // the balancer's, after the backend committed
			return
		}
		l.handler(w, r)
	}, func(o *Options) {
		p := &o.Default
		p.OnUpstreamError = UpstreamErrorReconcile
		p.AmbiguousStatuses = []int{502}
		p.Reconcile.Request = "GET /v1/charges?idempotency_key={key}"
		p.Reconcile.After, p.Reconcile.Every = time.Millisecond, 100*time.Millisecond
	})
	r := e.do(t, "POST", "/v1/charges", "k1", `{}`)
	var charge struct{ ID string }
	json.Unmarshal([]byte(r.body), &charge)
	if r.StatusCode != http.StatusOK || charge.ID != "ch_1" {
		t.Fatalf("got %d %s, want the found charge", r.StatusCode, r.body)
	}
}

// Settlements share the room of detached calls: past it, a key is marked
// and left to its next request, which takes it over once its lease
// expired and asks — it is never forwarded again.
//
// The handler and its store share a fake clock, moved by the test: a's
// lease, renewed while its lookups run, cannot run out before a renewal
// that was due, and b's runs out only when the test moves the clock past
// it, however slowly the machine runs.
func TestSettlementPastItsRoomIsLeftToTheNextRequest(t *testing.T) {
	const lockTTL = 300 * time.Millisecond
	l := &ledger{die: 2}
	l.lookup = func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Query().Get("idempotency_key") == "a" && !l.up() {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return true
		}
		return false
	}
	clock := executiontest.NewFakeClock()
	mem := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { mem.Close() })
	e := reconcileEnv(t, l, func(p *Policy) { p.LockTTL = lockTTL }, withStore(mem))
	e.handler.clock = clock
	e.handler.detachable.MaxN = 1
	done := sendUntilCleanup(t, e, "/v1/charges", "a") // holds the room
	advanceUntil(t, clock, lockTTL, "a's first lookup answered", func() bool { return e.probes(probeUnknown) >= 1 })
	b := e.do(t, "POST", "/v1/charges", "b", `{}`)
	if b.StatusCode != http.StatusBadGateway || !strings.Contains(b.body, "being settled") {
		t.Fatalf("b past the room: %d %s, want 502 being settled", b.StatusCode, b.body)
	}
	if r := e.do(t, "POST", "/v1/charges", "b", `{}`); r.StatusCode != http.StatusConflict || !strings.Contains(r.body, "being settled") {
		t.Fatalf("b's retry within lock_ttl: %d %s, want 409 being settled", r.StatusCode, r.body)
	}
	r := e.retryOnceTheRoomIsFree(t, clock, lockTTL, l, done, "b")
	if r.StatusCode != http.StatusOK || r.Header.Get(IdempotencyReconciled) != "true" {
		t.Fatalf("b after its lease expired: %d %s, want its charge from the lookup", r.StatusCode, r.body)
	}
	if effects, _ := l.count(); effects != 2 {
		t.Errorf("effects = %d, want 2 (a and b, once each)", effects)
	}
}

// flakyMarkers is a store whose next writes of a marker saying an outcome
// is being settled time out, as a store under strain does; the marker's
// lease is left taken, as a write that timed out leaves it. The marker
// written before a request is sent is taken.
type flakyMarkers struct {
	*memory.Store
	fail atomic.Int32
}

func (s *flakyMarkers) Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	if strings.HasSuffix(key, ReconcileSuffix) && len(rec.Header[markerPending]) == 0 && s.fail.Add(-1) >= 0 {
		return fmt.Errorf("the write timed out: %w", store.ErrUnavailable)
	}
	return s.Store.Complete(ctx, key, token, rec, ttl)
}

// A key past the room of settlements is left to its next owner only once
// its marker is written: a marker write the store fails is tried again,
// the key's lease renewed meanwhile, since a key left with a plain lease
// is forwarded again by its next owner after lock_ttl.
func TestKeyPastTheRoomIsLeftOnlyOnceMarked(t *testing.T) {
	l := &ledger{die: 2}
	l.lookup = func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Query().Get("idempotency_key") == "a" && !l.up() {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return true
		}
		return false
	}
	const lockTTL = time.Second
	clock := executiontest.NewFakeClock()
	st := &flakyMarkers{Store: memory.New(memory.Options{Now: clock.Now})}
	t.Cleanup(func() { st.Close() })
	e := reconcileEnv(t, l, func(p *Policy) { p.LockTTL = lockTTL }, withStore(st))
	e.handler.clock = clock
	e.handler.detachable.MaxN = 1
	done := sendUntilCleanup(t, e, "/v1/charges", "a") // holds the room
	advanceUntil(t, clock, lockTTL, "a's first lookup answered", func() bool { return e.probes(probeUnknown) >= 1 })
	// b's first marker write fails: it is written again on the clock.
	st.fail.Store(1)
	sent := sendUntilCleanup(t, e, "/v1/charges", "b")
	if b := advanceUntilAnswered(t, clock, lockTTL, "b past the room answered", sent); b.StatusCode != http.StatusBadGateway {
		t.Fatalf("b past the room: %d %s, want 502", b.StatusCode, b.body)
	}
	r := e.retryOnceTheRoomIsFree(t, clock, lockTTL, l, done, "b")
	if effects, _ := l.count(); effects != 2 {
		t.Fatalf("effects = %d, want 2 (a and b, once each): b was forwarded again", effects)
	}
	if r.StatusCode != http.StatusOK || r.Header.Get(IdempotencyReconciled) != "true" {
		t.Errorf("b after its lease expired: %d %s, want its charge from the lookup", r.StatusCode, r.body)
	}
}

// Under concurrent: wait a retry of a key being settled waits for the
// settled answer instead of getting 409.
func TestRetryOfAKeyBeingSettledWaitsUnderConcurrentWait(t *testing.T) {
	l := &ledger{die: 1}
	l.lookup = func(w http.ResponseWriter, r *http.Request) bool {
		if !l.up() {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return true
		}
		return false
	}
	e := reconcileEnv(t, l, func(p *Policy) { p.Concurrent, p.WaitTimeout = ConcurrentWait, 10*time.Second })
	first := make(chan *response, 1)
	go func() { first <- e.do(t, "POST", "/v1/charges", "k1", `{}`) }()
	waitFor(t, func() bool { return e.probes(probeUnknown) >= 1 })
	retry := make(chan *response, 1)
	go func() { retry <- e.do(t, "POST", "/v1/charges", "k1", `{}`) }()
	waitFor(t, func() bool { return e.probes(probeUnknown) >= 3 }) // the retry is waiting meanwhile
	l.mu.Lock()
	l.lookupsUp = true
	l.mu.Unlock()
	f, r := <-first, <-retry
	if f.StatusCode != http.StatusOK || r.StatusCode != http.StatusOK || r.body != f.body || !r.replayed() {
		t.Fatalf("first %d %s, retry %d %s: want the same settled charge", f.StatusCode, f.body, r.StatusCode, r.body)
	}
}

// A settlement takes the room of the body it may resend and of the answer
// it may record (max_response_body) from upstream.max_detached_bytes: it
// runs when both fit, and is left to the key's next request when they do
// not by a byte.
func TestSettlementTakesRoomForItsBodyAndAnAnswer(t *testing.T) {
	const body = `{"amount":5}`
	for _, tc := range []struct {
		name    string
		room    int64
		settled bool
	}{
		{"room for both", int64(len(body)) + 1000, true},
		{"a byte short", int64(len(body)) + 999, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := reconcileEnv(t, &ledger{die: 1}, func(p *Policy) { p.MaxResponseBody = 1000 })
			e.handler.detachable.MaxBytes = tc.room
			r := e.do(t, "POST", "/v1/charges", "k1", body)
			if settled := r.StatusCode == http.StatusOK && r.Header.Get(IdempotencyReconciled) == "true"; settled != tc.settled {
				t.Fatalf("got %d %s, settled here: %v, want %v", r.StatusCode, r.body, settled, tc.settled)
			}
			if !tc.settled && (r.StatusCode != http.StatusBadGateway || !strings.Contains(r.body, "being settled")) {
				t.Fatalf("got %d %s, want 502 being settled", r.StatusCode, r.body)
			}
		})
	}
}

// A detached call holds room among the detached calls. When its outcome
// turns unknown, the settlement that asks the upstream keeps that room
// rather than taking more: under upstream.max_detached: 1 the key is
// settled by the lookup at once, not left to its next request, and once
// it is, the room is free again — all of it, and once.
func TestDetachedCallWithUnknownOutcomeIsSettledWithinMaxDetachedOne(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header []string
		want   int // the first client's answer
	}{
		{"its client's timeout passed", nil, http.StatusGatewayTimeout},
		{"answered 202 under respond-async", []string{"Prefer", "respond-async"}, http.StatusAccepted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &chargeLedger{charges: map[string]bool{}}
			arrived, commit := make(chan struct{}, 1), make(chan struct{})
			handler := func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					l.lookup(w, r)
					return
				}
				l.post()
				arrived <- struct{}{}
				select {
				case <-commit:
				case <-r.Context().Done():
					return
				}
				l.commit(r.Header.Get("Idempotency-Key"))
				hangUp(w) // after its commit: the outcome is unknown
			}
			clock := executiontest.NewFakeClock()
			mem := memory.New(memory.Options{Now: clock.Now})
			t.Cleanup(func() { mem.Close() })
			e := newEnv(t, handler, func(o *Options) {
				o.UpstreamTimeout, o.MaxExecution, o.MaxDetached = testTimeout, testMaxExecution, 1
				o.AsyncSecret, o.Default.Async = testAsyncSecret, AsyncAllow
				reviewPolicy(&o.Default)
				o.Default.Reconcile.After, o.Default.Reconcile.Every = time.Millisecond, time.Second
			}, withStore(mem))
			e.handler.clock = clock
			t.Cleanup(func() {
				select {
				case <-commit:
				default:
					close(commit)
				}
			})

			first := make(chan *response, 1)
			go func() { first <- e.do(t, "POST", "/x", "k1", "{}", tc.header...) }()
			<-arrived
			if tc.want == http.StatusGatewayTimeout {
				clock.Advance(testTimeout) // the call goes on detached
			}
			if r := <-first; r.StatusCode != tc.want {
				t.Fatalf("first client: %d %s, want %d", r.StatusCode, r.body, tc.want)
			}
			close(commit)
			wait.SucceedsSoon(t, 10*time.Second, func() error {
				if got := e.detachedEnded(OutcomeUpstreamError); got != 1 {
					return fmt.Errorf("detached calls ended upstream_error = %v, want 1", got)
				}
				return nil
			})
			settleUntil(t, e, clock, clock.Now().Add(time.Minute))

			r := e.do(t, "POST", "/x", "k1", "{}")
			if r.StatusCode != http.StatusOK || !r.replayed() || r.Header.Get(IdempotencyReconciled) != "true" {
				t.Fatalf("retry: %d %s, want the lookup's answer, settled at once", r.StatusCode, r.body)
			}
			if n := testutil.ToFloat64(e.handler.metrics.detachRefused); n != 0 {
				t.Errorf("detach refused = %v, want 0: the settlement had the call's room", n)
			}
			if posts, effects := l.counts(); posts != 1 || effects != 1 {
				t.Errorf("posts = %d, effects = %d, want 1 and 1", posts, effects)
			}
			b := &e.handler.detachable
			if !b.Take(b.MaxBytes) {
				t.Fatal("after the settlement, room among the detached calls is still held")
			}
			defer b.Give(b.MaxBytes)
			if b.Take(0) {
				defer b.Give(0)
				t.Fatal("after the settlement, room was given back twice: upstream.max_detached admits two")
			}
		})
	}
}

// Under expired_keys: reject, a record a settlement wrote leaves a
// tombstone, as an executed one does: a retry after it expired gets 410
// key-expired and is never forwarded again.
func TestSettledKeyIsRefusedAfterItsRecordExpiredUnderExpiredKeysReject(t *testing.T) {
	clock := &manualClock{now: time.Now()}
	mem := memory.New(memory.Options{Now: clock.Now})
	ts := store.WithTombstones(mem, clock.Now)
	ts.Check(true)
	t.Cleanup(func() { ts.Close() })
	l := &ledger{die: 1, charges: map[string]string{}}
	e := newEnv(t, l.handler, withStore(ts), func(o *Options) {
		o.UpstreamTimeout = 10 * time.Second
		p := &o.Default
		p.OnUpstreamError = UpstreamErrorReconcile
		p.Reconcile.Request = "GET /v1/charges?idempotency_key={key}"
		p.Reconcile.After, p.Reconcile.Every = time.Millisecond, 100*time.Millisecond
		p.TTL, p.LockTTL, p.ExpiredKeys, p.ExpiredKeyWindow = time.Hour, time.Minute, ExpiredReject, 24*time.Hour
	})
	if r := e.do(t, "POST", "/v1/charges", "k1", `{}`); r.StatusCode != http.StatusOK || r.Header.Get(IdempotencyReconciled) != "true" {
		t.Fatalf("got %d %s, want the found charge", r.StatusCode, r.body)
	}
	clock.advance(time.Hour + time.Second)
	if r := e.do(t, "POST", "/v1/charges", "k1", `{}`); r.StatusCode != http.StatusGone || r.problemType() != "key-expired" {
		t.Fatalf("retry after ttl: %d %s, want 410 key-expired", r.StatusCode, r.body)
	}
	if effects, _ := l.count(); effects != 1 {
		t.Errorf("effects on the ledger = %d, want 1", effects)
	}
}

// A settlement whose client stopped waiting (upstream.timeout passed:
// 502, being settled) is still counted, once, by the outcome it reaches.
func TestSettlementItsClientStoppedWaitingForIsCountedWhenItEnds(t *testing.T) {
	l := &ledger{die: 1, charges: map[string]string{}}
	l.lookup = func(w http.ResponseWriter, r *http.Request) bool {
		if !l.up() {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return true
		}
		return false
	}
	e := newEnv(t, l.handler, func(o *Options) {
		o.UpstreamTimeout = time.Second // the client stops waiting then: the lookups answer nothing until it did
		p := &o.Default
		p.OnUpstreamError = UpstreamErrorReconcile
		p.Reconcile.Request = "GET /v1/charges?idempotency_key={key}"
		p.Reconcile.After, p.Reconcile.Every = time.Millisecond, 50*time.Millisecond
	})
	r := e.do(t, "POST", "/v1/charges", "k1", `{}`)
	if r.StatusCode != http.StatusBadGateway || !strings.Contains(r.body, "being settled") {
		t.Fatalf("got %d %s, want 502 being settled once upstream.timeout passed", r.StatusCode, r.body)
	}
	l.mu.Lock()
	l.lookupsUp = true
	l.mu.Unlock()
	waitFor(t, func() bool { return e.outcomes("default", OutcomeReconciledFound) == 1 })
	if got := e.outcomes("default", OutcomeUpstreamError); got != 1 {
		t.Errorf("upstream_error = %v, want 1 (the client's 502)", got)
	}
}

// The first caller of a key being settled waits for its answer up to
// upstream.timeout on the handler's clock, from when it took the key, as
// its lease and its upstream call are timed: once that has passed, with
// the lookups still answering nothing, it gets the 502 saying the outcome
// is being settled.
func TestCallerOfAKeyBeingSettledWaitsUpToUpstreamTimeoutOnTheHandlersClock(t *testing.T) {
	const timeout = 3 * time.Second
	l := &ledger{die: 1, charges: map[string]string{}}
	l.lookup = func(w http.ResponseWriter, r *http.Request) bool {
		http.Error(w, "not yet", http.StatusServiceUnavailable)
		return true
	}
	clock := executiontest.NewFakeClock()
	mem := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { mem.Close() })
	e := newEnv(t, l.handler, func(o *Options) {
		o.UpstreamTimeout = timeout
		p := &o.Default
		p.OnUpstreamError = UpstreamErrorReconcile
		p.Reconcile.Request = "GET /v1/charges?idempotency_key={key}"
		p.Reconcile.After, p.Reconcile.Every = time.Millisecond, 50*time.Millisecond
		p.Reconcile.For = time.Hour
	}, withStore(mem))
	e.handler.clock = clock
	kh := e.keyHash(t, "k1")

	took := clock.Now() // the clock stands still until the test moves it
	first := sendUntilCleanup(t, e, "/v1/charges", "k1")
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if _, _, ok := e.handler.Settling(kh); !ok {
			return errors.New("the unknown outcome is not being settled yet")
		}
		return nil
	})

	for clock.Now().Before(took.Add(timeout)) {
		clock.AdvanceToNext(t, time.Minute, "the next step settling the key")
	}
	var r *response
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		clock.Advance(0) // the caller's wait, if armed once the clock had passed its end
		select {
		case r = <-first:
			return nil
		default:
			return fmt.Errorf("the caller still waits %v after it took the key, upstream.timeout %v", clock.Now().Sub(took), timeout)
		}
	})
	if r == nil || r.StatusCode != http.StatusBadGateway || !strings.Contains(r.body, "being settled") {
		t.Fatalf("caller: %v, want the 502 saying the outcome is being settled", r)
	}
	if _, _, ok := e.handler.Settling(kh); !ok {
		t.Error("the key stopped being settled when its caller stopped waiting")
	}
}

// An upstream that could not be reached never saw the request: there is
// nothing to ask it about, so on a route that settles lost answers the
// client gets its 502 upstream-unreachable at once, as on any route, and
// the key is free for the retry.
func TestUnreachableUpstreamOnAReconcileRouteIsAnsweredAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := &url.URL{Scheme: "http", Host: ln.Addr().String()}
	ln.Close() // nothing listens there any more
	e := newEnv(t, nil, func(o *Options) {
		o.Upstream = closed
		p := &o.Default
		p.OnUpstreamError = UpstreamErrorReconcile
		p.Reconcile.Request = "GET /v1/charges?idempotency_key={key}"
		p.Reconcile.After, p.Reconcile.Every = time.Millisecond, 100*time.Millisecond
	})
	for i := range 2 {
		r := e.do(t, "POST", "/v1/charges", "k1", `{"amount":5}`)
		if r.StatusCode != http.StatusBadGateway || r.problemType() != "upstream-unreachable" {
			t.Fatalf("try %d with an unreachable upstream: %d %q, want 502 upstream-unreachable", i+1, r.StatusCode, r.body)
		}
	}
}

// A settled key's record is found by its raw key, as every record is
// (`keys find`, docs/operating.md): the keys whose outcome was unknown are
// the ones support asks about. Whatever settled it: the lookup's answer,
// the resend's, or then: keep's 502.
func TestSettledRecordIsFoundByItsRawKey(t *testing.T) {
	for name, tc := range map[string]struct {
		noCommit bool
		policy   func(*Policy)
		status   int
	}{
		"found":  {status: http.StatusOK},
		"resent": {noCommit: true, policy: func(p *Policy) { p.Reconcile.Resend = true }, status: http.StatusCreated},
		"then keep": {noCommit: true, policy: func(p *Policy) {
			p.Reconcile.Absent = []int{http.StatusGone} // nothing settles it
			p.Reconcile.For = 50 * time.Millisecond
		}, status: http.StatusBadGateway},
	} {
		t.Run(name, func(t *testing.T) {
			mem := memory.New(memory.Options{})
			t.Cleanup(func() { mem.Close() })
			l := &ledger{die: 1, noCommit: tc.noCommit, charges: map[string]string{}}
			e := newEnv(t, l.handler, withStore(mem), func(o *Options) {
				o.UpstreamTimeout = 10 * time.Second
				p := &o.Default
				p.OnUpstreamError = UpstreamErrorReconcile
				p.Reconcile.Request = "GET /v1/charges?idempotency_key={key}"
				p.Reconcile.After, p.Reconcile.Every = time.Millisecond, 20*time.Millisecond
				if tc.policy != nil {
					tc.policy(p)
				}
			})
			if r := e.do(t, "POST", "/v1/charges", "order-42", `{}`, "Authorization", "Bearer c1"); r.StatusCode != tc.status {
				t.Fatalf("got %d %s, want %d", r.StatusCode, r.body, tc.status)
			}
			entries, _, err := mem.List(context.Background(), store.Completed, "", 100)
			if err != nil {
				t.Fatal(err)
			}
			var found int
			for _, en := range entries {
				if en.Record != nil && en.Record.Lookup.Key == store.LookupKey("order-42") {
					found++
				}
			}
			if found != 1 {
				t.Errorf("records found by the raw key = %d of %d, want the settled one", found, len(entries))
			}
		})
	}
}

// advanceUntil moves clock to each timer armed within d of now, as soon as
// one is, until done reports true: the steps of a settlement, each taken
// once the last one has armed the next, however slowly the machine runs
// them. Timers due later (a caller's upstream.timeout) are left alone;
// what names what done waits for.
func advanceUntil(t *testing.T, clock *executiontest.FakeClock, d time.Duration, what string, done func() bool) {
	t.Helper()
	start := clock.Now()
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if done() {
			return nil
		}
		if next, ok := clock.NextTimer(); ok && !next.After(clock.Now().Add(d)) {
			clock.Advance(next.Sub(clock.Now()))
		}
		return fmt.Errorf("%s: not yet, %s on the clock after it was awaited", what, clock.Now().Sub(start))
	})
}

// advanceUntilAnswered is advanceUntil for the answer of a request sent
// with sendUntilCleanup.
func advanceUntilAnswered(t *testing.T, clock *executiontest.FakeClock, d time.Duration, what string, answer <-chan *response) *response {
	t.Helper()
	var r *response
	var left bool
	advanceUntil(t, clock, d, what, func() bool {
		select {
		case got, ok := <-answer:
			r, left = got, !ok
			return true
		default:
			return false
		}
	})
	if left {
		t.Fatalf("%s: the request failed without an answer", what)
	}
	return r
}

// retryOnceTheRoomIsFree lets the ledger's lookups answer, moving clock
// until the settlement holding the room of detached calls (key "a", whose
// answer done delivers) has ended with its charge and given the room
// back, then moves it lockTTL further, past the lease of key, left to run
// out, and returns the answer to key sent again.
func (e *env) retryOnceTheRoomIsFree(t *testing.T, clock *executiontest.FakeClock, lockTTL time.Duration, l *ledger, done <-chan *response, key string) *response {
	t.Helper()
	l.mu.Lock()
	l.lookupsUp = true
	l.mu.Unlock()
	if r := advanceUntilAnswered(t, clock, lockTTL, "a settled", done); r.StatusCode != http.StatusOK {
		t.Fatalf("a: %d %s, want its charge", r.StatusCode, r.body)
	}
	waitFor(t, func() bool { return e.handler.settling.Load() == 0 })
	clock.Advance(lockTTL)
	return advanceUntilAnswered(t, clock, lockTTL, key+" sent again answered", sendUntilCleanup(t, e, "/v1/charges", key))
}
