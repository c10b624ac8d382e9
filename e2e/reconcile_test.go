package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/pgtest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// chargeLedger is a payment service behind the proxy: POST /v1/charges
// commits a charge to its ledger, under the request's idempotency key and
// its body's order_id, and then answers — or dies after the commit (closes
// the connection without answering), as a service killed mid-request does.
// GET /v1/charges?idempotency_key=K, GET /v1/orders/ID and GET
// /v1/requests/ID (the POST's X-Request-Id) answer from the ledger: 200
// with the charge, 404 when there is none. Effects are counted on the
// ledger, not in requests.
type chargeLedger struct {
	srv *httptest.Server

	mu sync.Mutex
	// byKey, byOrder and byRequestID are the ledger: the charge's JSON,
	// also under the X-Request-Id the POST carried.
	byKey, byOrder, byRequestID map[string]string
	effects                     map[string]int // charges committed per key
	posts                       int            // POSTs that reached the ledger
	lookups                     int
	// dieAfterCommit makes the next commits close the connection instead
	// of answering; dieBeforeCommit the next POSTs close it without
	// committing.
	dieAfterCommit, dieBeforeCommit int
	// answerAs answers every POST with this status after committing (a
	// load balancer's 502 for a request the backend committed), when not 0.
	answerAs int
	// lookupsDown answers lookups 503 while set.
	lookupsDown bool
	// held, when set, is where the next commit waits before answering,
	// and hold is closed when it does.
	held, hold chan struct{}
	// chaos, when set, picks each POST's fate and each lookup's: see
	// chaosFate.
	chaos *rand.Rand
}

// chaosFate sets, from l.chaos, what the next POST does: one in three dies
// after its commit, one in six before it, one in six commits and answers
// 502 (a balancer's); the rest answer. One lookup in five fails (503).
// l.mu must be held.
func (l *chargeLedger) chaosFate() {
	switch l.answerAs = 0; l.chaos.IntN(6) {
	case 0, 1:
		l.dieAfterCommit = 1
	case 2:
		l.dieBeforeCommit = 1
	case 3:
		l.answerAs = http.StatusBadGateway
	}
}

func startChargeLedger(t *testing.T) *chargeLedger {
	t.Helper()
	l := &chargeLedger{byKey: map[string]string{}, byOrder: map[string]string{}, byRequestID: map[string]string{}, effects: map[string]int{}}
	l.srv = httptest.NewServer(http.HandlerFunc(l.serve))
	t.Cleanup(l.srv.Close)
	return l
}

func (l *chargeLedger) URL() string { return l.srv.URL }

func (l *chargeLedger) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.Method == http.MethodGet {
		l.lookup(w, r)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	order := jsonMember(string(body), "order_id")
	l.mu.Lock()
	l.posts++
	if l.chaos != nil {
		l.chaosFate()
	}
	if l.dieBeforeCommit > 0 {
		l.dieBeforeCommit--
		l.mu.Unlock()
		hangUp(w)
		return
	}
	l.effects[key]++
	n := 0
	for _, c := range l.effects {
		n += c
	}
	charge := fmt.Sprintf(`{"id":"ch_%d","order_id":%q,"amount":100,"status":"succeeded"}`, n, order)
	l.byKey[key] = charge
	if order != "" {
		l.byOrder[order] = charge
	}
	if id := r.Header.Get("X-Request-Id"); id != "" {
		l.byRequestID[id] = charge
	}
	die := l.dieAfterCommit > 0
	if die {
		l.dieAfterCommit--
	}
	status := l.answerAs
	held, hold := l.held, l.hold
	l.held, l.hold = nil, nil
	l.mu.Unlock()
	if held != nil {
		close(held)
		<-hold
	}
	switch {
	case die:
		hangUp(w)
	case status != 0:
		http.Error(w, "upstream connect error", status)
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, charge)
	}
}

func (l *chargeLedger) lookup(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	l.lookups++
	down := l.lookupsDown || l.chaos != nil && l.chaos.IntN(5) == 0
	var charge string
	var ok bool
	if id, found := strings.CutPrefix(r.URL.Path, "/v1/orders/"); found {
		charge, ok = l.byOrder[id]
	} else if id, found := strings.CutPrefix(r.URL.Path, "/v1/requests/"); found {
		charge, ok = l.byRequestID[id]
	} else {
		charge, ok = l.byKey[r.URL.Query().Get("idempotency_key")]
	}
	l.mu.Unlock()
	switch {
	case down:
		http.Error(w, "lookups unavailable", http.StatusServiceUnavailable)
	case !ok:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":"no such charge"}`)
	default:
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, charge)
	}
}

// hangUp closes the connection without an answer.
func hangUp(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		conn.Close()
	}
}

// jsonMember is the string member name of a flat JSON object, "" when absent.
func jsonMember(body, name string) string {
	_, rest, ok := strings.Cut(body, `"`+name+`":"`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

func (l *chargeLedger) set(f func(l *chargeLedger)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(l)
}

// effectsOf is how many charges key committed.
func (l *chargeLedger) effectsOf(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.effects[key]
}

func (l *chargeLedger) counts() (posts, lookups int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.posts, l.lookups
}

// reconcileConfig is a proxy in front of l whose charges route settles
// unknown outcomes by looking them up, with lookup settings in extra
// (YAML flow-mapping entries). Store settings are the caller's.
func reconcileConfig(l *chargeLedger, extra string) proxyConfig {
	block := `{request: "GET /v1/charges?idempotency_key={key}", after: 100ms, every: 500ms`
	if extra != "" {
		block += ", " + extra
	}
	return proxyConfig{
		Upstream:        l.URL(),
		UpstreamTimeout: 10 * time.Second,
		ShutdownTimeout: 10 * time.Second,
		Memory:          true,
		Defaults:        map[string]string{"ttl": "5m", "lock_ttl": "2s"},
		Routes: []routeConfig{{Match: "POST /v1/charges", Keys: map[string]string{
			"on_upstream_error": "reconcile",
			"reconcile":         block + "}",
		}}},
	}
}

func chargeRequest(key string) request {
	return request{Path: "/v1/charges", Key: key, Body: `{"amount":100,"order_id":"ord-` + key + `"}`}
}

// TestCommittedChargeWhoseAnswerWasLostIsAnsweredFromTheUpstreamsLedger
// is the seed case: the service commits the charge and dies before its
// answer. The first caller and every retry get the charge from the
// ledger's lookup, byte for byte the same, and the ledger holds one charge.
func TestCommittedChargeWhoseAnswerWasLostIsAnsweredFromTheUpstreamsLedger(t *testing.T) {
	l := startChargeLedger(t)
	l.set(func(l *chargeLedger) { l.dieAfterCommit = 1 })
	p := startProxy(t, "reconcile", reconcileConfig(l, ""))
	c := newClient(t, 20*time.Second)
	const key = "seed-case"

	first := mustSend(t, c, p.URL(), chargeRequest(key))
	if first.Status != http.StatusOK || !strings.Contains(first.Body, `"ch_1"`) {
		t.Fatalf("first caller: %s %s, want the committed charge", first, first.Body)
	}
	if first.Header.Get("Idempotency-Reconciled") != "true" || !first.Replayed() {
		t.Errorf("first caller's headers %v: want Idempotent-Replayed and Idempotency-Reconciled", first.Header)
	}
	for i := range 3 {
		r := mustSend(t, c, p.URL(), chargeRequest(key))
		if r.Status != first.Status || r.Body != first.Body || r.Header.Get("Idempotency-Reconciled") != "true" {
			t.Fatalf("retry %d: %s %q, want the first caller's %s %q", i, r, r.Body, first, first.Body)
		}
	}
	if n := l.effectsOf(key); n != 1 {
		t.Fatalf("charges on the ledger = %d, want 1", n)
	}
	if posts, _ := l.counts(); posts != 1 {
		t.Errorf("POSTs reaching the ledger = %d, want 1", posts)
	}
	labels := map[string]string{"route": "POST /v1/charges"}
	if got := metricSum(t, "idempotency_proxy_reconcile_probes_total", with(labels, "result", "found"), p); got != 1 {
		t.Errorf("probes found = %v, want 1", got)
	}
	if got := metricSum(t, "idempotency_proxy_requests_total", with(labels, "outcome", "reconciled_found"), p); got != 1 {
		t.Errorf("reconciled_found = %v, want 1", got)
	}
	// Access lines are buffered for up to a second: wait for this one.
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if lines := p.logLines(map[string]string{"msg": "access", "reconcile_probes": "1"}); len(lines) != 1 {
			return fmt.Errorf("access lines with reconcile_probes 1: %d, want 1", len(lines))
		}
		return nil
	})
}

func with(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range m {
		out[a] = b
	}
	return out
}

// TestChargeLostBeforeItsCommitIsResentOnce: the lookup says absent, and
// under resend the proxy forwards the original request once more itself:
// one charge, answered to the first caller and replayed to retries.
func TestChargeLostBeforeItsCommitIsResentOnce(t *testing.T) {
	l := startChargeLedger(t)
	l.set(func(l *chargeLedger) { l.dieBeforeCommit = 1 })
	p := startProxy(t, "reconcile", reconcileConfig(l, "resend: true"))
	c := newClient(t, 20*time.Second)
	const key = "absent-resend"

	first := mustSend(t, c, p.URL(), chargeRequest(key))
	if first.Status != http.StatusCreated || !strings.Contains(first.Body, `"ch_1"`) {
		t.Fatalf("first caller: %s %q, want the resent charge", first, first.Body)
	}
	if r := mustSend(t, c, p.URL(), chargeRequest(key)); !r.Replayed() || r.Body != first.Body {
		t.Fatalf("retry: %s %q, want the replay of %q", r, r.Body, first.Body)
	}
	if n := l.effectsOf(key); n != 1 {
		t.Fatalf("charges on the ledger = %d, want 1", n)
	}
	if posts, _ := l.counts(); posts != 2 {
		t.Errorf("POSTs reaching the ledger = %d, want 2 (the lost one and the resend)", posts)
	}
}

// TestChargeLostBeforeItsCommitWithoutResendReleasesTheKey: absent without
// resend releases the key; the client's retry executes it, once.
func TestChargeLostBeforeItsCommitWithoutResendReleasesTheKey(t *testing.T) {
	l := startChargeLedger(t)
	l.set(func(l *chargeLedger) { l.dieBeforeCommit = 1 })
	p := startProxy(t, "reconcile", reconcileConfig(l, ""))
	c := newClient(t, 20*time.Second)
	const key = "absent-release"

	first := mustSend(t, c, p.URL(), chargeRequest(key))
	if first.Status != http.StatusBadGateway || !strings.Contains(first.Body, "did not take effect") {
		t.Fatalf("first caller: %s %q, want 502 saying it did not take effect", first, first.Body)
	}
	if n := l.effectsOf(key); n != 0 {
		t.Fatalf("charges before the retry = %d, want 0", n)
	}
	if r := mustSend(t, c, p.URL(), chargeRequest(key)); r.Status != http.StatusCreated || r.Replayed() {
		t.Fatalf("retry: %s, want an execution", r)
	}
	if n := l.effectsOf(key); n != 1 {
		t.Fatalf("charges on the ledger = %d, want 1", n)
	}
}

// TestKeyWhoseLookupFailsIsInFlightUntilTheLookupAnswers: while lookups
// fail, retries get 409 in-flight saying the outcome is being settled, and
// nothing is forwarded, and `keys get` shows the key being settled and
// its lookups; once lookups answer, the retry gets the charge.
func TestKeyWhoseLookupFailsIsInFlightUntilTheLookupAnswers(t *testing.T) {
	l := startChargeLedger(t)
	l.set(func(l *chargeLedger) { l.dieAfterCommit, l.lookupsDown = 1, true })
	cfg := reconcileConfig(l, "")
	cfg.UpstreamTimeout = time.Second // the first caller stops waiting
	cfg.Env = []string{"IDEMPOTENCY_PROXY_ADMIN_TOKEN=" + runbookToken}
	p := startProxy(t, "reconcile", cfg)
	c := newClient(t, 20*time.Second)
	const key = "lookup-down"

	first := mustSend(t, c, p.URL(), chargeRequest(key))
	if first.Status != http.StatusBadGateway || !strings.Contains(first.Body, "being settled") {
		t.Fatalf("first caller: %s %q, want 502 saying the outcome is being settled", first, first.Body)
	}
	r := mustSend(t, c, p.URL(), chargeRequest(key))
	if r.Status != http.StatusConflict || r.Problem() != "in-flight" || !strings.Contains(r.Body, "being settled") || r.Header.Get("Retry-After") == "" {
		t.Fatalf("retry while lookups fail: %s %q %v, want 409 in-flight being settled with Retry-After", r, r.Body, r.Header)
	}
	marked := p.logLines(map[string]string{"msg": "upstream outcome unknown: the key is marked as being settled, and the upstream is asked"})
	if len(marked) != 1 {
		t.Fatalf("%d lines saying the key is being settled, want 1", len(marked))
	}
	hash := fmt.Sprint(marked[0]["key_hash"])
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		got := keysJSON(t, p, "get", hash)
		s, _ := got["settling"].(map[string]any)
		if got["state"] != "in_flight" || s == nil || s["since"] == nil {
			return fmt.Errorf("keys get = %v, want in_flight and settling since", got)
		}
		if n, _ := s["probes"].(float64); n < 2 {
			return fmt.Errorf("keys get = %v, want at least 2 probes", got)
		}
		return nil
	})
	_, before := l.counts()
	l.set(func(l *chargeLedger) { l.lookupsDown = false })
	settled := sendUntilSettled(t, c, p.URL(), key, 10*time.Second, "still being settled")
	if settled.Status != http.StatusOK || !strings.Contains(settled.Body, `"ch_1"`) || settled.Header.Get("Idempotency-Reconciled") != "true" {
		t.Fatalf("after the lookup recovered: %s %q, want the charge", settled, settled.Body)
	}
	if n := l.effectsOf(key); n != 1 {
		t.Fatalf("charges on the ledger = %d, want 1", n)
	}
	if before < 1 {
		t.Errorf("%d lookups while they failed, want at least 1", before)
	}
	labels := map[string]string{"route": "POST /v1/charges", "result": "unknown"}
	if got := metricSum(t, "idempotency_proxy_reconcile_probes_total", labels, p); got < 1 {
		t.Errorf("probes unknown = %v, want at least 1", got)
	}
}

// TestKeyNoLookupSettlesGetsThen: lookups that never answer found or
// absent stop after reconcile.for; then: keep records the 502.
func TestKeyNoLookupSettlesGetsThen(t *testing.T) {
	l := startChargeLedger(t)
	l.set(func(l *chargeLedger) { l.dieAfterCommit, l.lookupsDown = 1, true })
	cfg := reconcileConfig(l, "for: 1s, then: keep")
	p := startProxy(t, "reconcile", cfg)
	c := newClient(t, 20*time.Second)
	const key = "gave-up"

	first := mustSend(t, c, p.URL(), chargeRequest(key))
	if first.Status != http.StatusBadGateway || first.Problem() != "upstream-failed" {
		t.Fatalf("first caller: %s %q, want the kept 502", first, first.Body)
	}
	if r := mustSend(t, c, p.URL(), chargeRequest(key)); r.Status != http.StatusBadGateway || !r.Replayed() {
		t.Fatalf("retry: %s, want the kept 502 replayed", r)
	}
	if n := l.effectsOf(key); n != 1 {
		t.Fatalf("charges on the ledger = %d, want 1", n)
	}
	labels := map[string]string{"route": "POST /v1/charges", "outcome": "reconcile_gave_up"}
	if got := metricSum(t, "idempotency_proxy_requests_total", labels, p); got != 1 {
		t.Errorf("reconcile_gave_up = %v, want 1", got)
	}
}

// TestIntermediarys502ForACommittedChargeIsSettledByTheLookup: a load
// balancer answers 502 for a request the backend committed; under
// ambiguous_statuses that is an unknown outcome, not the key's answer.
func TestIntermediarys502ForACommittedChargeIsSettledByTheLookup(t *testing.T) {
	l := startChargeLedger(t)
	l.set(func(l *chargeLedger) { l.answerAs = http.StatusBadGateway })
	cfg := reconcileConfig(l, "")
	cfg.Routes[0].Keys["ambiguous_statuses"] = "[502, 504]"
	p := startProxy(t, "reconcile", cfg)
	c := newClient(t, 20*time.Second)
	const key = "balancer-502"

	first := mustSend(t, c, p.URL(), chargeRequest(key))
	if first.Status != http.StatusOK || !strings.Contains(first.Body, `"ch_1"`) {
		t.Fatalf("first caller: %s %q, want the committed charge instead of the 502", first, first.Body)
	}
	if r := mustSend(t, c, p.URL(), chargeRequest(key)); r.Body != first.Body {
		t.Fatalf("retry: %s %q, want %q", r, r.Body, first.Body)
	}
	if n := l.effectsOf(key); n != 1 {
		t.Fatalf("charges on the ledger = %d, want 1", n)
	}
}

// TestLookupByABodyMember: the lookup names the order by a member of the
// original JSON body; a request without it is refused before forwarding.
func TestLookupByABodyMember(t *testing.T) {
	l := startChargeLedger(t)
	l.set(func(l *chargeLedger) { l.dieAfterCommit = 1 })
	cfg := reconcileConfig(l, "")
	cfg.Routes[0].Keys["reconcile"] = `{request: "GET /v1/orders/{json:/order_id}", after: 100ms, every: 500ms}`
	p := startProxy(t, "reconcile", cfg)
	c := newClient(t, 20*time.Second)

	first := mustSend(t, c, p.URL(), chargeRequest("by-order"))
	if first.Status != http.StatusOK || !strings.Contains(first.Body, `"ord-by-order"`) {
		t.Fatalf("first caller: %s %q, want the order's charge", first, first.Body)
	}
	r := mustSend(t, c, p.URL(), request{Path: "/v1/charges", Key: "no-order", Body: `{"amount":100}`})
	if r.Status != http.StatusBadRequest || !strings.Contains(r.Body, "/order_id") {
		t.Fatalf("a charge without order_id: %s %q, want 400 naming /order_id", r, r.Body)
	}
	if posts, _ := l.counts(); posts != 1 {
		t.Errorf("POSTs reaching the ledger = %d, want 1", posts)
	}
}

// TestSettlementOutlivesTheSettlingProxy: the proxy settling a key is
// SIGKILLed; after lock_ttl another proxy on the same store (on the file
// store, the same proxy restarted) takes the key, finds it being settled
// and looks it up — it never forwards it: on Redis (single, Cluster,
// Sentinel), Postgres and the file store. With encryption at rest the
// marker is sealed like any record, and read alike.
func TestSettlementOutlivesTheSettlingProxy(t *testing.T) {
	for _, kind := range []string{"redis", "redis-cluster", "redis-sentinel", "postgres", "file", "postgres-sealed"} {
		t.Run(kind, func(t *testing.T) {
			l := startChargeLedger(t)
			l.set(func(l *chargeLedger) { l.dieAfterCommit, l.lookupsDown = 1, true })
			cfg := reconcileConfig(l, "")
			cfg.Memory = false
			switch kind {
			case "redis":
				cfg.RedisURL = redistest.Start(t).URL()
			case "redis-cluster": // the marker hashes to a slot of its own
				cfg.RedisAddrs = redistest.StartCluster(t, 3).Addrs()
			case "redis-sentinel":
				sn := redistest.StartSentinel(t)
				cfg.RedisAddrs, cfg.MasterName = sn.SentinelAddrs(), sn.MasterName()
			case "file":
				cfg.FilePath = t.TempDir()
			case "postgres-sealed":
				keys := filepath.Join(t.TempDir(), "keys")
				keysFile(t, keys, keyLine("k1", 7))
				cfg.Env = []string{"IDEMPOTENCY_PROXY_STORE_ENCRYPTION_KEYS_FILE=" + keys}
				fallthrough
			default:
				cfg.PostgresURL = pgtest.Start(t).URL()
			}
			cfg.UpstreamTimeout = time.Second
			settling := startProxy(t, "settling", cfg)
			var other *proxyProc
			if kind != "file" { // one process per directory: the same one comes back
				cfg.UpstreamTimeout = 10 * time.Second
				other = startProxy(t, "other", cfg)
			}
			c := newClient(t, 20*time.Second)
			const key = "outlives"

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go send(ctx, c, settling.URL(), chargeRequest(key))
			wait.SucceedsSoon(t, 10*time.Second, func() error {
				if len(settling.logLines(map[string]string{"msg": "upstream outcome unknown: the key is marked as being settled, and the upstream is asked"})) == 0 {
					return errors.New("the key is not marked yet")
				}
				return nil
			})
			settling.Kill()
			if other == nil {
				settling.Restart()
				other = settling
			}
			l.set(func(l *chargeLedger) { l.lookupsDown = false })

			var r reply
			wait.SucceedsSoon(t, 15*time.Second, func() error {
				r = mustSend(t, c, other.URL(), chargeRequest(key))
				if r.Status == http.StatusConflict {
					return errors.New("409: the dead proxy's lease has not expired yet")
				}
				return nil
			})
			if r.Status != http.StatusOK || !strings.Contains(r.Body, `"ch_1"`) || r.Header.Get("Idempotency-Reconciled") != "true" {
				t.Fatalf("after the settling proxy died: %s %q, want the committed charge from the lookup", r, r.Body)
			}
			if n := l.effectsOf(key); n != 1 {
				t.Fatalf("charges on the ledger = %d, want 1", n)
			}
			if posts, _ := l.counts(); posts != 1 {
				t.Errorf("POSTs reaching the ledger = %d, want 1: the key was forwarded again", posts)
			}
			if again := mustSend(t, c, other.URL(), chargeRequest(key)); again.Body != r.Body {
				t.Errorf("retry: %s %q, want %q", again, again.Body, r.Body)
			}
		})
	}
}

// TestNextOwnerLooksUpTheRequestWhoseOutcomeIsUnknown: the lookup names
// the charge by a header each attempt sets anew (X-Request-Id), which the
// fingerprint leaves out. The proxy settling the key is SIGKILLed; the
// proxy that takes the key over with a retry asks about the request that
// was sent, not about the retry, which the ledger never saw: it finds the
// charge instead of resending it.
func TestNextOwnerLooksUpTheRequestWhoseOutcomeIsUnknown(t *testing.T) {
	l := startChargeLedger(t)
	l.set(func(l *chargeLedger) { l.dieAfterCommit, l.lookupsDown = 1, true })
	cfg := reconcileConfig(l, "resend: true")
	cfg.Routes[0].Keys["reconcile"] = `{request: "GET /v1/requests/{header:X-Request-Id}", after: 100ms, every: 500ms, resend: true}`
	cfg.Memory, cfg.RedisURL = false, redistest.Start(t).URL()
	cfg.UpstreamTimeout = time.Second
	settling := startProxy(t, "settling", cfg)
	cfg.UpstreamTimeout = 10 * time.Second
	other := startProxy(t, "other", cfg)
	c := newClient(t, 20*time.Second)
	const key = "per-attempt-id"
	attempt := func(id string) request {
		rq := chargeRequest(key)
		rq.Header = map[string]string{"X-Request-Id": id}
		return rq
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go send(ctx, c, settling.URL(), attempt("req-1"))
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if len(settling.logLines(map[string]string{"msg": "upstream outcome unknown: the key is marked as being settled, and the upstream is asked"})) == 0 {
			return errors.New("the key is not marked yet")
		}
		return nil
	})
	settling.Kill()
	l.set(func(l *chargeLedger) { l.lookupsDown = false })

	var r reply
	wait.SucceedsSoon(t, 15*time.Second, func() error {
		r = mustSend(t, c, other.URL(), attempt("req-2"))
		if r.Status == http.StatusConflict {
			return errors.New("409: the dead proxy's lease has not expired yet")
		}
		return nil
	})
	if n := l.effectsOf(key); n != 1 {
		t.Fatalf("charges on the ledger = %d, want 1: the next owner asked about the retry's X-Request-Id and resent the charge", n)
	}
	if r.Status != http.StatusOK || !strings.Contains(r.Body, `"ch_1"`) || r.Header.Get("Idempotency-Reconciled") != "true" {
		t.Fatalf("the retry: %s %q, want the committed charge from the lookup", r, r.Body)
	}
}

// TestKeyTakenOverAfterReconcileForIsAskedBeforeThen: the proxy settling
// a committed charge, whose lookups fail, is SIGKILLed, and the client
// retries only once reconcile.for has passed since the failure. The proxy
// that takes the key over asks the upstream before it applies then: the
// lookup, back by now, finds the charge. Applying then: release unasked
// would let the retry charge again.
func TestKeyTakenOverAfterReconcileForIsAskedBeforeThen(t *testing.T) {
	l := startChargeLedger(t)
	l.set(func(l *chargeLedger) { l.dieAfterCommit, l.lookupsDown = 1, true })
	cfg := reconcileConfig(l, "for: 1s, then: release")
	cfg.Memory, cfg.RedisURL = false, redistest.Start(t).URL()
	cfg.UpstreamTimeout = time.Second
	settling := startProxy(t, "settling", cfg)
	cfg.UpstreamTimeout = 10 * time.Second
	other := startProxy(t, "other", cfg)
	c := newClient(t, 20*time.Second)
	const key = "asked-after-for"

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go send(ctx, c, settling.URL(), chargeRequest(key))
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if _, lookups := l.counts(); lookups == 0 {
			return errors.New("no lookup failed yet")
		}
		return nil
	})
	settling.Kill()
	l.set(func(l *chargeLedger) { l.lookupsDown = false })

	// The dead proxy's lease (lock_ttl 2s) outlives reconcile.for (1s):
	// the first request the other proxy takes the key with comes after it.
	r := sendUntilSettled(t, c, other.URL(), key, 15*time.Second, "409: the dead proxy's lease has not expired yet")
	if r.Status != http.StatusOK || !strings.Contains(r.Body, `"ch_1"`) || r.Header.Get("Idempotency-Reconciled") != "true" {
		t.Errorf("the retry after reconcile.for: %s %q, want the committed charge from the lookup", r, r.Body)
	}
	mustSend(t, c, other.URL(), chargeRequest(key))
	if n := l.effectsOf(key); n != 1 {
		t.Fatalf("charges on the ledger = %d, want 1: then: release applied without asking", n)
	}
}

// TestProxyKilledWhileItsCallRunsLeavesTheKeyToBeAskedAbout: the proxy
// is SIGKILLed while the service runs a charge it has committed, before
// either knows the outcome is unknown. The key was marked before it was
// sent, so the retry that takes it after lock_ttl — on the other replica
// on a shared store, on the proxy restarted on a durable one — asks the
// service, finds the charge and replays it: the ledger holds one charge.
func TestProxyKilledWhileItsCallRunsLeavesTheKeyToBeAskedAbout(t *testing.T) {
	for _, kind := range []string{"redis", "file"} {
		t.Run(kind, func(t *testing.T) {
			l := startChargeLedger(t)
			held, hold := make(chan struct{}), make(chan struct{})
			l.set(func(l *chargeLedger) { l.held, l.hold = held, hold })
			cfg := reconcileConfig(l, "")
			cfg.Memory = false
			var killed, next *proxyProc
			if kind == "file" { // one process per directory: the same one comes back
				cfg.FilePath = t.TempDir()
				killed = startProxy(t, "killed", cfg)
				next = killed
			} else {
				cfg.RedisURL = redistest.Start(t).URL()
				ps := startReplicas(t, 2, cfg)
				killed, next = ps[0], ps[1]
			}
			c := newClient(t, 20*time.Second)
			const key = "killed-mid-call"

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go send(ctx, c, killed.URL(), chargeRequest(key))
			<-held // committed, not answered
			killed.Kill()
			close(hold)
			if kind == "file" {
				killed.Restart()
			}

			var r reply
			wait.SucceedsSoon(t, 15*time.Second, func() error {
				r = mustSend(t, c, next.URL(), chargeRequest(key))
				if r.Status == http.StatusConflict {
					return errors.New("409: the dead proxy's lease has not expired yet")
				}
				return nil
			})
			if n := l.effectsOf(key); n != 1 {
				t.Fatalf("charges on the ledger = %d, want 1: the retry was forwarded, not asked about", n)
			}
			if r.Status != http.StatusOK || !strings.Contains(r.Body, `"ch_1"`) || r.Header.Get("Idempotency-Reconciled") != "true" {
				t.Fatalf("the retry: %s %q, want the committed charge from the lookup", r, r.Body)
			}
			if again := mustSend(t, c, next.URL(), chargeRequest(key)); again.Body != r.Body {
				t.Errorf("retry after it settled: %s %q, want %q", again, again.Body, r.Body)
			}
		})
	}
}

// TestReadmesChargesRouteChargesOnce runs the README's charges route as it
// is written: the service commits and dies before its answer, and the
// client gets the charge, once.
func TestReadmesChargesRouteChargesOnce(t *testing.T) {
	routes := yamlBlock(t, markdownSection(t, readme(t), "How it works"))
	l := startChargeLedger(t)
	l.set(func(l *chargeLedger) { l.dieAfterCommit = 1 })
	p := startProxy(t, "readme", proxyConfig{Upstream: l.URL(), UpstreamTimeout: 10 * time.Second, Memory: true, Extra: routes})
	c := newClient(t, 20*time.Second)
	r := mustSend(t, c, p.URL(), chargeRequest("readme"))
	if r.Status != http.StatusOK || !strings.Contains(r.Body, `"ch_1"`) {
		t.Fatalf("first caller: %s %q, want the committed charge", r, r.Body)
	}
	if again := mustSend(t, c, p.URL(), chargeRequest("readme")); again.Body != r.Body {
		t.Fatalf("retry: %s %q, want %q", again, again.Body, r.Body)
	}
	if n := l.effectsOf("readme"); n != 1 {
		t.Fatalf("charges on the ledger = %d, want 1", n)
	}
}

// TestChaosOfUpstreamDeathsAfterCommitOnAReconcileRoute: retrying clients
// charge through two replicas on one Redis while the service dies after
// its commit, before it, answers a balancer's 502 for a committed charge,
// and fails lookups, at random. No key is charged twice, and every charged
// key's answer, once settled, is its charge.
func TestChaosOfUpstreamDeathsAfterCommitOnAReconcileRoute(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run skipped in -short mode")
	}
	seconds, seed := envInt(t, "CHAOS_SECONDS", 10), envInt(t, "CHAOS_SEED", chaosSeed)
	t.Logf("chaos run: CHAOS_SECONDS=%d CHAOS_SEED=%d", seconds, seed)
	l := startChargeLedger(t)
	l.set(func(l *chargeLedger) { l.chaos = rand.New(rand.NewPCG(uint64(seed), 3)) })
	cfg := reconcileConfig(l, "resend: true")
	cfg.Memory, cfg.RedisURL = false, redistest.Start(t).URL()
	cfg.Routes[0].Keys["ambiguous_statuses"] = "[502]"
	ps := startReplicas(t, 2, cfg)
	c := newClient(t, 20*time.Second)

	ctx, stop := context.WithTimeout(context.Background(), time.Duration(seconds)*time.Second)
	defer stop()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var keys []string
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(seed)*31+uint64(w), 11))
			rt := retrier{Client: c, Bases: rotate(bases(ps), w), MaxAttempts: 6, MaxWait: time.Second, Rand: rng}
			for i := 0; i < 200 && ctx.Err() == nil; i++ {
				key := fmt.Sprintf("chaos-%d-%d", w, i)
				mu.Lock()
				keys = append(keys, key)
				mu.Unlock()
				rt.Do(ctx, chargeRequest(key))
			}
		}()
	}
	wg.Wait()
	l.set(func(l *chargeLedger) { l.chaos = nil }) // the service recovers

	twice := 0
	for i, key := range keys {
		var r reply
		wait.SucceedsSoon(t, 30*time.Second, func() error {
			r = mustSend(t, c, ps[i%2].URL(), chargeRequest(key))
			if r.Status == http.StatusConflict {
				return fmt.Errorf("key %s: still being settled", key)
			}
			return nil
		})
		n := l.effectsOf(key)
		if n > 1 {
			twice++
			t.Errorf("key %s: charged %d times", key, n)
		}
		l.mu.Lock()
		charge := l.byKey[key]
		l.mu.Unlock()
		if n == 1 && r.Body != charge {
			t.Errorf("key %s: answered %s %q, want its charge %q", key, r, r.Body, charge)
		}
	}
	posts, lookups := l.counts()
	t.Logf("%d keys, %d POSTs, %d lookups, %d keys charged twice", len(keys), posts, lookups, twice)
	if lookups == 0 {
		t.Error("no lookup was sent: the run never met an unknown outcome")
	}
}

// sendUntilSettled sends the charge of key to url until the proxy no
// longer answers 409 (why: what the 409 means while it lasts), within
// bound, and returns the first other answer.
func sendUntilSettled(t *testing.T, c *http.Client, url, key string, bound time.Duration, why string) reply {
	t.Helper()
	var r reply
	wait.SucceedsSoon(t, bound, func() error {
		r = mustSend(t, c, url, chargeRequest(key))
		if r.Status == http.StatusConflict {
			return errors.New(why)
		}
		return nil
	})
	return r
}
