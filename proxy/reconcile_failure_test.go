package proxy

// Settlements of unknown outcomes under failures: a resend that outlives
// lock_ttl, a proxy cut off from the store, a settlement lost to another
// owner, a resend whose own outcome is unknown, a shutdown mid-call, and a
// key that would redirect the lookup.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution/executiontest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// chargeLedger is a minimal upstream: POSTs are charges, GETs look them up
// by ?idempotency_key=. post decides what each POST (1-based) does.
type chargeLedger struct {
	mu      sync.Mutex
	posts   int
	charges map[string]bool
	effects int
}

func (l *chargeLedger) commit(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.charges[key] = true
	l.effects++
}

// post counts a POST that reached the ledger and returns its number,
// from 1.
func (l *chargeLedger) post() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.posts++
	return l.posts
}

func (l *chargeLedger) counts() (posts, effects int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.posts, l.effects
}

func (l *chargeLedger) lookup(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	ok := l.charges[r.URL.Query().Get("idempotency_key")]
	l.mu.Unlock()
	if !ok {
		http.Error(w, "no such charge", http.StatusNotFound)
		return
	}
	w.Write([]byte(`{"status":"succeeded"}`))
}

// serve is the upstream of a charge whose answer is lost: a POST commits
// the charge under its key and hangs up before answering; a GET is the
// lookup.
func (l *chargeLedger) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		l.lookup(w, r)
		return
	}
	l.commit(r.Header.Get("Idempotency-Key"))
	hangUp(w)
}

func hangUp(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		conn.Close()
	}
}

func reviewPolicy(p *Policy) {
	p.OnUpstreamError = UpstreamErrorReconcile
	p.Reconcile.Request = "GET /v1/charges?idempotency_key={key}"
	p.Reconcile.Resend = true
}

// a resend runs for up to upstream.max_execution with no lease
// renewal (reconcilelookup.go resend: one Settling.RenewUnknown, then
// h.rp.ServeHTTP; Settling.HoldFor is the only renewer). When the resend outlives
// lock_ttl, another proxy takes the key, finds the marker, probes at once
// (since+after is long past), sees "absent" while the resend still runs,
// and resends a second time: the key is forwarded three times and
// charged twice.
//
// A, B and their store share a fake clock, moved to each of A's waits
// once A has armed it: however slowly the machine runs A's renewals, the
// lease cannot run out before one that was due.
func TestResendOutlivingLockTTLIsRenewedAndNeverResentByTheNextOwner(t *testing.T) {
	l := &chargeLedger{charges: map[string]bool{}}
	gate := make(chan struct{})
	var closeGate sync.Once
	release := func() { closeGate.Do(func() { close(gate) }) }
	t.Cleanup(release)
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			l.lookup(w, r)
			return
		}
		n := l.post()
		switch n {
		case 1: // dies before its commit: absent
			hangUp(w)
			return
		case 2: // the resend: slow, longer than lock_ttl
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		l.commit(r.Header.Get("Idempotency-Key"))
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":"ch"}`))
	}
	const lockTTL = 300 * time.Millisecond
	clock := executiontest.NewFakeClock()
	mem := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { mem.Close() })
	pol := func(o *Options) {
		o.UpstreamTimeout = 10 * time.Second
		reviewPolicy(&o.Default)
		o.Default.LockTTL = lockTTL
		o.Default.Reconcile.After, o.Default.Reconcile.Every = time.Millisecond, 50*time.Millisecond
	}
	a := newEnv(t, handler, pol, withStore(mem))
	b := newEnv(t, nil, pol, withStore(mem), func(o *Options) { o.Upstream = a.up.url(t) })
	a.handler.clock, b.handler.clock = clock, clock

	aCtx, leave := context.WithCancel(context.Background())
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		req := a.request(t, aCtx, "/v1/charges", "k1")
		if res, err := a.srv.Client().Do(req); err == nil {
			res.Body.Close()
		}
	}()
	t.Cleanup(func() {
		// On a failure, A's client may be waiting for a settlement on
		// the clock, which has stopped: it leaves.
		release()
		leave()
		<-aDone
	})
	// A looks the key up after reconcile.after, finds it absent, and
	// resends it.
	for posts, _ := l.counts(); posts < 2; posts, _ = l.counts() {
		clock.AdvanceToNext(t, lockTTL, "A's next step settling the key")
	}
	// While A's resend runs, B must answer 409 (being settled) and never
	// forward: five lock_ttls pass, a renewal of A's lease at a time.
	resent := clock.Now()
	for clock.Now().Before(resent.Add(5 * lockTTL)) {
		clock.AdvanceToNext(t, lockTTL, "the next renewal of A's lease while its resend runs")
		if err := answersSettling(t, b, l); err != nil {
			release()
			t.Fatalf("%s into A's resend: %v", clock.Now().Sub(resent), err)
		}
	}
	release()
	waitFor(t, func() bool { _, e := l.counts(); return e >= 1 })
	if posts, effects := l.counts(); posts != 2 || effects != 1 {
		t.Fatalf("posts = %d, effects = %d, want 2 and 1", posts, effects)
	}
}

// answersSettling sends b the key k1 of a POST /v1/charges that another
// proxy settles, and says what is wrong unless b answers 409 at once
// without taking the key or forwarding it.
func answersSettling(t *testing.T, b *env, l *chargeLedger) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := b.request(t, ctx, "/v1/charges", "k1")
	type answer struct {
		status int
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		res, err := b.srv.Client().Do(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		res.Body.Close()
		answered <- answer{status: res.StatusCode}
	}()
	var got answer
	err := wait.SoonError(10*time.Second, func() error {
		select {
		case got = <-answered:
			return nil
		default:
		}
		if b.handler.settling.Load() > 0 {
			return nil
		}
		return errors.New("B neither answered nor took the key")
	})
	switch posts, _ := l.counts(); {
	case posts > 2:
		return fmt.Errorf("the key was forwarded %d times while A's resend still ran: B took the key over after lock_ttl and resent it", posts)
	case err != nil:
		return err
	case b.handler.settling.Load() > 0:
		return errors.New("B took the key over, A's lease having run out: it settles it itself")
	case got.err != nil:
		return got.err
	case got.status != http.StatusConflict:
		return fmt.Errorf("B answered %d while A's resend runs, want 409: the key is being settled", got.status)
	}
	return nil
}

// after a resend whose own outcome is unknown (the connection
// died again), the next lookup goes out `every` later, not `after`; an
// upstream whose work outlives the connection still says "absent", the
// key is released and the caller told it "did not take effect" — the
// retry executes again and the resend commits too.
func TestUnknownResendIsAskedAboutOnlyAfterReconcileAfter(t *testing.T) {
	l := &chargeLedger{charges: map[string]bool{}}
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			l.lookup(w, r)
			return
		}
		n := l.post()
		key := r.Header.Get("Idempotency-Key")
		switch n {
		case 1: // dies before its commit: absent
			hangUp(w)
			return
		case 2: // the resend: its connection dies, its work commits 150ms later (< after)
			hangUp(w)
			time.AfterFunc(150*time.Millisecond, func() { l.commit(key) })
			return
		}
		l.commit(key)
		w.WriteHeader(http.StatusCreated)
	}
	e := newEnv(t, handler, func(o *Options) {
		o.UpstreamTimeout = 10 * time.Second
		reviewPolicy(&o.Default)
		// after is chosen so that the upstream's work finishes within it.
		o.Default.Reconcile.After, o.Default.Reconcile.Every = 400*time.Millisecond, 20*time.Millisecond
	})
	first := e.do(t, "POST", "/v1/charges", "k1", `{}`)
	if strings.Contains(first.body, "did not take effect") {
		retry := e.do(t, "POST", "/v1/charges", "k1", `{}`)
		waitFor(t, func() bool { _, eff := l.counts(); return eff >= 2 })
		t.Fatalf("first caller told %q, retry %d: the resend, whose outcome was unknown, was probed after every (20ms) not after (400ms) and the key released; effects now 2",
			first.body, retry.StatusCode)
	}
}

// {key} (and {json:}, {header:}, {query:} in the path) are
// escaped with url.PathEscape, which leaves "." and ".." alone: a key of
// ".." turns the lookup "GET /v1/charges/{key}/status" into
// "/v1/charges/../status", which an upstream that normalises paths serves
// as /v1/status: a probe of another resource, whose 200 is recorded as
// the key's answer.
func TestProbeDotSegmentKeyDoesNotRedirectTheLookup(t *testing.T) {
	p, err := parseProbeTemplate("GET /v1/charges/{key}/status")
	if err != nil {
		t.Fatal(err)
	}
	r, _ := http.NewRequest("POST", "http://x/v1/charges", nil)
	for _, key := range []string{"..", "."} {
		got, err := p.fill(r, key, nil)
		if err != nil {
			continue // refusing the key is a fix too
		}
		for _, seg := range strings.Split(got, "/") {
			if seg == ".." || seg == "." {
				t.Errorf("key %q fills the lookup as %q: a dot segment the upstream resolves to another path", key, got)
			}
		}
	}
}

// partitioned is a store this proxy cannot renew leases in (a network
// partition between it and the store), while other proxies can.
type partitioned struct {
	*memory.Store
	cut atomic.Bool
}

func (p *partitioned) Extend(ctx context.Context, key, token string, ttl time.Duration) error {
	if p.cut.Load() {
		return errors.New("dial tcp: i/o timeout")
	}
	return p.Store.Extend(ctx, key, token, ttl)
}

// Settling.RenewUnknown treats any error but ErrLockLost as "not lost",
// and never compares the lease's end with the clock: a proxy cut off from
// the store goes on probing past lock_ttl, and resend's "ownership is
// proven just before" passes on a failed Extend. Meanwhile another proxy
// took the key over (marker) and resends too: charged twice.
func TestReconcileCutOffFromTheStoreNeverResendsWithoutTheLease(t *testing.T) {
	l := &chargeLedger{charges: map[string]bool{}}
	var absentNow, aResent atomic.Bool
	var absentSince atomic.Int64
	var aHost, bHost string
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			// A's lookups say absent first; B's once A resent (or 500ms
			// later, when A, correctly, did not).
			late := absentNow.Load() && time.Since(time.Unix(0, absentSince.Load())) > 500*time.Millisecond
			if !absentNow.Load() || r.Host == bHost && !aResent.Load() && !late {
				http.Error(w, "lookup not ready", http.StatusServiceUnavailable)
				return
			}
			l.lookup(w, r)
			return
		}
		n := l.post()
		if n == 1 {
			hangUp(w)
			return
		}
		if r.Host == aHost { // A's resend: slow
			aResent.Store(true)
			<-gate
		}
		l.commit(r.Header.Get("Idempotency-Key"))
		w.WriteHeader(http.StatusCreated)
	}
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	pa := &partitioned{Store: st}
	pol := func(o *Options) {
		o.UpstreamTimeout = 3 * time.Second
		reviewPolicy(&o.Default)
		o.Default.LockTTL = 300 * time.Millisecond
		o.Default.Reconcile.After, o.Default.Reconcile.Every, o.Default.Reconcile.For = time.Millisecond, 50*time.Millisecond, 2*time.Second
	}
	a := newEnv(t, handler, pol, withStore(pa))
	b := newEnv(t, nil, pol, withStore(st), func(o *Options) { o.Upstream = a.up.url(t) })
	aHost, bHost = strings.TrimPrefix(a.srv.URL, "http://"), strings.TrimPrefix(b.srv.URL, "http://")
	kh := b.keyHash(t, "k1")

	aDone := make(chan *response, 1)
	go func() { aDone <- a.do(t, "POST", "/x", "k1", `{}`) }()
	waitFor(t, func() bool { return a.probes(probeUnknown) >= 1 })
	pa.cut.Store(true) // A can no longer renew its lease
	bDone := make(chan *response, 1)
	go func() {
		// B asks until A's lease expires and B is answered: the last
		// answer, a 409 if it never was.
		var r *response
		_ = wait.SoonError(30*time.Second, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			r = b.doCtx(t, ctx, "POST", "/x", "k1", `{}`)
			cancel()
			return stillInFlight(r)
		})
		bDone <- r
	}()
	waitFor(t, func() bool { _, _, ok := b.handler.Settling(kh); return ok }) // B took the key over
	absentSince.Store(time.Now().UnixNano())
	absentNow.Store(true)
	rb := <-bDone
	release()
	ra := <-aDone
	t.Logf("A's caller: %d %q; B's caller: %d %q", ra.StatusCode, ra.body, rb.StatusCode, rb.body)
	waitFor(t, func() bool { _, _, ok := a.handler.Settling(kh); return !ok })
	if posts, effects := l.counts(); posts != 2 || effects != 1 {
		t.Fatalf("posts %d, effects %d: want 2 and 1 — A resent a key whose lease it could not renew, and B resent it as its new owner", posts, effects)
	}
}

// record() loops on trySettle until "settled", which also
// means "lost to another owner"; the settlement then reports the found
// answer as the key's (reconcile.go record), and the first caller gets
// the probe's answer although the record written is another owner's.
func TestSettlementLostToAnotherOwnerGivesTheFirstCallerTheKeysRecord(t *testing.T) {
	l := &chargeLedger{charges: map[string]bool{}}
	var absentNow atomic.Bool
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			if !absentNow.Load() {
				http.Error(w, "lookup not ready", http.StatusServiceUnavailable)
				return
			}
			l.lookup(w, r) // found: 200 {"status":"succeeded"}
			return
		}
		n := l.post()
		if n == 1 {
			hangUp(w)
			return
		}
		l.commit(r.Header.Get("Idempotency-Key"))
		w.WriteHeader(http.StatusCreated) // the resend's answer: 201
	}
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	pa := &partitioned{Store: st}
	pol := func(o *Options) {
		o.UpstreamTimeout = 3 * time.Second
		reviewPolicy(&o.Default)
		o.Default.LockTTL = 300 * time.Millisecond
		o.Default.Reconcile.After, o.Default.Reconcile.Every, o.Default.Reconcile.For = time.Millisecond, 50*time.Millisecond, 2*time.Second
	}
	a := newEnv(t, handler, pol, withStore(pa))
	b := newEnv(t, nil, pol, withStore(st), func(o *Options) { o.Upstream = a.up.url(t) })
	kh := b.keyHash(t, "k1")
	aDone := make(chan *response, 1)
	go func() { aDone <- a.do(t, "POST", "/x", "k1", `{}`) }()
	waitFor(t, func() bool { return a.probes(probeUnknown) >= 1 })
	pa.cut.Store(true)
	bDone := make(chan *response, 1)
	go func() {
		var r *response
		_ = wait.SoonError(30*time.Second, func() error {
			r = b.do(t, "POST", "/x", "k1", `{}`)
			return stillInFlight(r)
		})
		bDone <- r
	}()
	waitFor(t, func() bool { _, _, ok := b.handler.Settling(kh); return ok })
	absentNow.Store(true)
	<-bDone
	ra := <-aDone
	retry := b.do(t, "POST", "/x", "k1", `{}`)
	if ra.StatusCode != retry.StatusCode || ra.body != retry.body {
		t.Fatalf("A's first caller got %d %q, a retry gets %d %q: A's lost record was reported as the key's answer", ra.StatusCode, ra.body, retry.StatusCode, retry.body)
	}
}

// a shutdown whose grace ran out while the upstream ran a
// reconcile route's request (execute.go conclude, case failShuttingDown
// && sent) leaves the lease to expire with no marker: the outcome is as
// unknown as after a reset, but the next owner forwards the key blindly
// instead of asking (docs/request-handling.md: a key being settled is never forwarded blindly).
func TestShutdownMidCallOnReconcileRouteLeavesTheKeyToBeLookedUp(t *testing.T) {
	shutDownMidCall(t, false)
}

// A key whose marker the store lost while the upstream ran its request
// (an operator's delete, an eviction) is marked again when a shutdown's
// grace runs out mid-call: its next owner asks the upstream, never
// forwards the request again.
func TestShutdownMidCallMarksAKeyWhoseMarkerWasLost(t *testing.T) {
	shutDownMidCall(t, true)
}

// shutDownMidCall runs a reconcile route's request on proxy A, whose
// upstream commits it and never answers, and aborts A (its
// shutdown_timeout passed), after deleting the key's marker when
// loseMarker; proxy B, on the same store, must then look the key up, not
// forward it again.
func shutDownMidCall(t *testing.T, loseMarker bool) {
	t.Helper()
	l := &chargeLedger{charges: map[string]bool{}}
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			l.lookup(w, r)
			return
		}
		n := l.post()
		l.commit(r.Header.Get("Idempotency-Key"))
		if n == 1 {
			<-r.Context().Done() // committed; the answer never comes
			return
		}
		w.WriteHeader(http.StatusCreated)
	}
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	pol := func(o *Options) {
		o.UpstreamTimeout = 3 * time.Second
		reviewPolicy(&o.Default)
		o.Default.LockTTL = 300 * time.Millisecond
		o.Default.Reconcile.After, o.Default.Reconcile.Every = time.Millisecond, 50*time.Millisecond
	}
	a := newEnv(t, handler, pol, withStore(st))
	b := newEnv(t, nil, pol, withStore(st), func(o *Options) { o.Upstream = a.up.url(t) })
	aDone := make(chan *response, 1)
	go func() { aDone <- a.do(t, "POST", "/x", "k1", `{}`) }()
	waitFor(t, func() bool { p, _ := l.counts(); return p >= 1 })
	if loseMarker {
		if err := st.Delete(context.Background(), a.keyHash(t, "k1")+ReconcileSuffix); err != nil {
			t.Fatalf("deleting the marker written before the request was sent: %v", err)
		}
	}
	a.handler.Abort() // shutdown_timeout passed
	<-aDone
	var r *response
	wait.SucceedsSoon(t, 30*time.Second, func() error {
		r = b.do(t, "POST", "/x", "k1", `{}`)
		return stillInFlight(r)
	})
	if posts, effects := l.counts(); posts != 1 || effects != 1 {
		t.Fatalf("after the shutdown the next owner got %d %q; posts %d, effects %d: want the key looked up, not forwarded again", r.StatusCode, r.body, posts, effects)
	}
}

// A resend whose proxy loses the key while it runs (cut off from the
// store) is never sent again by the key's next owner: the marker says it
// went out, so the next owner asks, and an absent answer after a resend
// goes to reconcile.then.
func TestResendIsNeverRepeatedByTheKeysNextOwner(t *testing.T) {
	l := &chargeLedger{charges: map[string]bool{}}
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	pa := &partitioned{Store: st}
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	// Deferred, not only a cleanup: a failure must let the resend end
	// before the servers close.
	defer release()
	t.Cleanup(release)
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			l.lookup(w, r)
			return
		}
		n := l.post()
		switch n {
		case 1: // dies before its commit: absent
			hangUp(w)
			return
		case 2: // A's resend: A is cut off from the store while it runs
			pa.cut.Store(true)
			<-gate
		}
		l.commit(r.Header.Get("Idempotency-Key"))
		w.WriteHeader(http.StatusCreated)
	}
	pol := func(o *Options) {
		o.UpstreamTimeout = 3 * time.Second
		reviewPolicy(&o.Default)
		o.Default.LockTTL = 300 * time.Millisecond
		o.Default.Reconcile.After, o.Default.Reconcile.Every = time.Millisecond, 50*time.Millisecond
	}
	a := newEnv(t, handler, pol, withStore(pa))
	b := newEnv(t, nil, pol, withStore(st), func(o *Options) { o.Upstream = a.up.url(t) })
	aDone := make(chan *response, 1)
	go func() { aDone <- a.do(t, "POST", "/x", "k1", `{}`) }()
	waitFor(t, func() bool { p, _ := l.counts(); return p >= 2 })
	var rb *response
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		rb = b.do(t, "POST", "/x", "k1", `{}`)
		if rb.StatusCode == http.StatusConflict {
			return errors.New("still being settled")
		}
		return nil
	})
	if posts, _ := l.counts(); posts != 2 {
		t.Fatalf("posts = %d, want 2: the key's next owner resent a key whose resend had gone out", posts)
	}
	if rb.StatusCode != http.StatusBadGateway {
		t.Errorf("the next owner's answer: %d %q, want reconcile.then (keep): 502", rb.StatusCode, rb.body)
	}
	release()
	<-aDone
}

// A resend is sent only once a renewal proved the key still held: while
// the store cannot be reached, absent answers wait, and the resend goes
// out when the store is back.
func TestResendWaitsForARenewalThatProvesTheLease(t *testing.T) {
	l := &chargeLedger{charges: map[string]bool{}}
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	pa := &partitioned{Store: st}
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			l.lookup(w, r)
			return
		}
		n := l.post()
		if n == 1 {
			pa.cut.Store(true)
			hangUp(w)
			return
		}
		l.commit(r.Header.Get("Idempotency-Key"))
		w.WriteHeader(http.StatusCreated)
	}
	a := newEnv(t, handler, func(o *Options) {
		o.UpstreamTimeout = 10 * time.Second
		reviewPolicy(&o.Default)
		o.Default.LockTTL = 10 * time.Second
		o.Default.Reconcile.After, o.Default.Reconcile.Every = time.Millisecond, 20*time.Millisecond
	}, withStore(pa))
	aDone := make(chan *response, 1)
	go func() { aDone <- a.do(t, "POST", "/x", "k1", `{}`) }()
	waitFor(t, func() bool { return a.probes(probeAbsent) >= 3 })
	if posts, _ := l.counts(); posts != 1 {
		t.Fatalf("posts = %d while no renewal succeeded, want 1: resent without proof that the key is still held", posts)
	}
	pa.cut.Store(false)
	if r := <-aDone; r.StatusCode != http.StatusCreated {
		t.Fatalf("once the store is back: %d %q, want the resend's 201", r.StatusCode, r.body)
	}
	if posts, effects := l.counts(); posts != 2 || effects != 1 {
		t.Fatalf("posts %d, effects %d, want 2 and 1", posts, effects)
	}
}

// A proxy that cannot renew the lease of a key it settles stops at the
// lease's end, as far as it knows it: past it another proxy may hold the
// key. Its caller hears the outcome is being settled.
func TestSettlingProxyCutOffFromTheStoreStopsAtItsLeasesEnd(t *testing.T) {
	var posts atomic.Int64
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			http.Error(w, "lookup not ready", http.StatusServiceUnavailable)
			return
		}
		posts.Add(1)
		hangUp(w)
	}
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	pa := &partitioned{Store: st}
	a := newEnv(t, handler, func(o *Options) {
		o.UpstreamTimeout = 3 * time.Second
		reviewPolicy(&o.Default)
		o.Default.LockTTL = 300 * time.Millisecond
		o.Default.Reconcile.After, o.Default.Reconcile.Every, o.Default.Reconcile.For = time.Millisecond, 50*time.Millisecond, time.Minute
	}, withStore(pa))
	kh := a.keyHash(t, "k1")
	aDone := make(chan *response, 1)
	go func() { aDone <- a.do(t, "POST", "/x", "k1", `{}`) }()
	waitFor(t, func() bool { return a.probes(probeUnknown) >= 1 })
	pa.cut.Store(true)
	waitFor(t, func() bool { _, _, ok := a.handler.Settling(kh); return !ok })
	r := <-aDone
	if r.StatusCode != http.StatusBadGateway || !strings.Contains(r.body, "being settled") {
		t.Fatalf("caller: %d %q, want 502 being settled", r.StatusCode, r.body)
	}
	if n := posts.Load(); n != 1 {
		t.Fatalf("posts = %d, want 1", n)
	}
}

// stealing is a store in which the key's lease passes to another owner,
// which records its own answer, just as this proxy records its found one.
type stealing struct {
	*memory.Store
	key   string
	other *store.Record
	once  sync.Once
}

func (s *stealing) Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	if key == s.key {
		s.once.Do(func() {
			_ = s.Store.Release(ctx, key, token)
			res, err := s.Store.Begin(ctx, key, store.Lease{Fingerprint: rec.Fingerprint}, ttl)
			if err == nil && res.State == store.Acquired {
				s.other.Fingerprint = rec.Fingerprint
				_ = s.Store.Complete(ctx, key, res.Token, s.other, ttl)
			}
		})
	}
	return s.Store.Complete(ctx, key, token, rec, ttl)
}

// A settlement whose record the store refused, the key having passed to
// another owner, gives its first caller the key's record: the answer
// every retry gets, never the refused one.
func TestFirstCallerGetsTheKeysRecordWhenItsOwnWasRefused(t *testing.T) {
	l := &chargeLedger{charges: map[string]bool{}}
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			l.lookup(w, r) // found: 200 {"status":"succeeded"}
			return
		}
		l.commit(r.Header.Get("Idempotency-Key"))
		hangUp(w)
	}
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	other := &store.Record{Status: http.StatusCreated, Header: map[string][]string{"Content-Length": {"5"}},
		Body: []byte("other"), CreatedAt: time.Now().Truncate(time.Millisecond)}
	ss := &stealing{Store: st, other: other}
	a := newEnv(t, handler, func(o *Options) {
		o.UpstreamTimeout = 3 * time.Second
		reviewPolicy(&o.Default)
		o.Default.Reconcile.After, o.Default.Reconcile.Every = time.Millisecond, 50*time.Millisecond
	}, withStore(ss))
	ss.key = a.keyHash(t, "k1")
	first := a.do(t, "POST", "/x", "k1", `{}`)
	retry := a.do(t, "POST", "/x", "k1", `{}`)
	if first.StatusCode != http.StatusCreated || first.body != "other" || retry.StatusCode != first.StatusCode || retry.body != first.body {
		t.Fatalf("first caller: %d %q, retry: %d %q; want both the other owner's 201 \"other\"", first.StatusCode, first.body, retry.StatusCode, retry.body)
	}
}

// The first lookup waits reconcile.after: an upstream whose work outlives
// the connection has committed by then, and is found, not told absent.
func TestFirstLookupWaitsReconcileAfter(t *testing.T) {
	l := &chargeLedger{charges: map[string]bool{}}
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			l.lookup(w, r)
			return
		}
		key := r.Header.Get("Idempotency-Key")
		hangUp(w)
		// Its work commits 100ms after the connection died, well within after.
		time.AfterFunc(100*time.Millisecond, func() { l.commit(key) })
	}
	e := newEnv(t, handler, func(o *Options) {
		o.UpstreamTimeout = 10 * time.Second
		reviewPolicy(&o.Default)
		o.Default.Reconcile.Resend = false
		o.Default.Reconcile.After, o.Default.Reconcile.Every = time.Second, 20*time.Millisecond
	})
	r := e.do(t, "POST", "/v1/charges", "k1", `{}`)
	if r.StatusCode != http.StatusOK || r.Header.Get(IdempotencyReconciled) != "true" {
		t.Fatalf("first caller: %d %q, want the found charge", r.StatusCode, r.body)
	}
}

// A lookup is sent again and again: only GET and HEAD, which change
// nothing, are accepted, and the error says so.
func TestLookupMethodMustChangeNothing(t *testing.T) {
	for _, tmpl := range []string{"POST /v1/charges/{key}", "DELETE /v1/charges/{key}"} {
		_, err := parseProbeTemplate(tmpl)
		if err == nil || !strings.Contains(err.Error(), "GET or HEAD") {
			t.Errorf("%q: err = %v, want one naming GET or HEAD", tmpl, err)
		}
	}
	for _, tmpl := range []string{"GET /v1/charges/{key}", "HEAD /v1/charges/{key}"} {
		if _, err := parseProbeTemplate(tmpl); err != nil {
			t.Errorf("%q: %v", tmpl, err)
		}
	}
}

// bare is a store with only the proxy's own operations: it cannot read or
// delete a key's marker.
type bare struct{ s *memory.Store }

func (b bare) Begin(ctx context.Context, key string, l store.Lease, ttl time.Duration) (store.BeginResult, error) {
	return b.s.Begin(ctx, key, l, ttl)
}
func (b bare) Extend(ctx context.Context, key, token string, ttl time.Duration) error {
	return b.s.Extend(ctx, key, token, ttl)
}
func (b bare) Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	return b.s.Complete(ctx, key, token, rec, ttl)
}
func (b bare) Release(ctx context.Context, key, token string) error {
	return b.s.Release(ctx, key, token)
}

// A reconciling route on a store that cannot read a key's marker is
// refused when the handler is made, the default route or one of the
// routes, named: its next owner could not tell the key is being settled.
func TestReconcileRouteNeedsAStoreThatReadsMarkers(t *testing.T) {
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	u, _ := url.Parse("http://127.0.0.1:1")
	p := DefaultPolicy()
	reviewPolicy(&p)
	_, err := New(Options{Store: bare{st}, Upstream: u, Default: p})
	if err == nil || !strings.Contains(err.Error(), "route "+defaultRoute+": on_upstream_error: reconcile needs a store") {
		t.Fatalf("New: err = %v, want reconcile refused on this store", err)
	}
	keep := DefaultPolicy()
	keep.OnUpstreamError = UpstreamErrorKeep
	if _, err := New(Options{Store: bare{st}, Upstream: u, Default: keep}); err != nil {
		t.Fatalf("keep on the same store: %v", err)
	}
	routes := []Route{{Pattern: "POST /v1/refunds", Policy: keep}, {Pattern: "POST /v1/charges", Policy: p}}
	_, err = New(Options{Store: bare{st}, Upstream: u, Default: keep, Routes: routes})
	if err == nil || !strings.Contains(err.Error(), "route POST /v1/charges: on_upstream_error: reconcile needs a store") {
		t.Fatalf("New with a reconciling route: err = %v, want the route refused on this store", err)
	}
	routes[1].Policy = keep
	if _, err := New(Options{Store: bare{st}, Upstream: u, Default: keep, Routes: routes}); err != nil {
		t.Fatalf("routes under keep on the same store: %v", err)
	}
}

// A settled key's marker is deleted only when it is this settlement's: a
// marker written for a later unknown outcome of the key stays.
func TestSettledKeyDropsOnlyItsOwnMarker(t *testing.T) {
	l := &chargeLedger{charges: map[string]bool{}}
	handler := l.serve
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	e := newEnv(t, handler, func(o *Options) {
		reviewPolicy(&o.Default)
		o.Default.Reconcile.After, o.Default.Reconcile.Every = time.Millisecond, 50*time.Millisecond
	}, withStore(st))
	if r := e.do(t, "POST", "/x", "own", `{}`); r.StatusCode != http.StatusOK {
		t.Fatalf("own: %d %q", r.StatusCode, r.body)
	}
	mk := e.keyHash(t, "own") + ReconcileSuffix
	waitFor(t, func() bool { _, err := st.Inspect(context.Background(), mk); return errors.Is(err, store.ErrNotFound) })

	// A marker of another settlement, written while this one's lookups run.
	kh := e.keyHash(t, "other")
	swapped := &swapMarker{Store: st, marker: kh + ReconcileSuffix}
	e2 := newEnv(t, handler, func(o *Options) {
		reviewPolicy(&o.Default)
		o.Default.Reconcile.After, o.Default.Reconcile.Every = time.Millisecond, 50*time.Millisecond
	}, withStore(swapped), func(o *Options) { o.Upstream = e.up.url(t) })
	if r := e2.do(t, "POST", "/x", "other", `{}`); r.StatusCode != http.StatusOK {
		t.Fatalf("other: %d %q", r.StatusCode, r.body)
	}
	ent, err := st.Inspect(context.Background(), kh+ReconcileSuffix)
	if err != nil || ent.Record == nil || !ent.Record.CreatedAt.Equal(swapped.otherAt) {
		t.Fatalf("the other settlement's marker: %+v, %v; want it left", ent, err)
	}
}

// swapMarker replaces the key's marker, once written, with another
// settlement's (another CreatedAt), as a later owner would write it.
type swapMarker struct {
	*memory.Store
	marker  string
	once    sync.Once
	otherAt time.Time
}

func (s *swapMarker) Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	err := s.Store.Complete(ctx, key, token, rec, ttl)
	if key == s.marker && err == nil && len(rec.Header[markerPending]) == 0 {
		s.once.Do(func() {
			_ = s.Store.Delete(ctx, key)
			res, berr := s.Store.Begin(ctx, key, store.Lease{Fingerprint: rec.Fingerprint}, ttl)
			if berr != nil || res.State != store.Acquired {
				return
			}
			other := *rec
			other.CreatedAt = rec.CreatedAt.Add(-time.Hour)
			s.otherAt = other.CreatedAt
			_ = s.Store.Complete(ctx, key, res.Token, &other, ttl)
		})
	}
	return err
}

// Under on_upstream_error: keep, an answer in ambiguous_statuses says
// nothing of the outcome: the key keeps the 502 upstream-failed, not that
// answer, and nothing is forwarded again.
func TestAmbiguousAnswerUnderKeepRecordsUpstreamFailed(t *testing.T) {
	var posts atomic.Int64
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		http.Error(w, "balancer: backend went away", http.StatusBadGateway)
	}, func(o *Options) {
		o.Default.OnUpstreamError = UpstreamErrorKeep
		o.Default.AmbiguousStatuses = []int{502}
	})
	e.do(t, "POST", "/x", "k1", `{}`)
	retry := e.do(t, "POST", "/x", "k1", `{}`)
	if retry.StatusCode != http.StatusBadGateway || !strings.Contains(retry.body, "upstream-failed") || !retry.replayed() {
		t.Fatalf("retry: %d %q, want the replayed 502 upstream-failed", retry.StatusCode, retry.body)
	}
	if n := posts.Load(); n != 1 {
		t.Fatalf("posts = %d, want 1", n)
	}
}

// A lookup under a cookie scope carries that cookie alone, never the rest
// of the client's Cookie header.
func TestLookupCarriesOnlyTheScopesCookie(t *testing.T) {
	var mu sync.Mutex
	var got []string
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			mu.Lock()
			got = append(got, r.Header.Values("Cookie")...)
			mu.Unlock()
			w.Write([]byte(`{"status":"succeeded"}`))
			return
		}
		hangUp(w)
	}, func(o *Options) {
		reviewPolicy(&o.Default)
		o.Default.ScopeHeaders = []ScopeHeader{{Cookie: "session"}}
		o.Default.Reconcile.After, o.Default.Reconcile.Every = time.Millisecond, 50*time.Millisecond
	})
	r := e.do(t, "POST", "/x", "k1", `{}`, "Cookie", "theme=dark; session=s1; csrf=secret")
	if r.StatusCode != http.StatusOK {
		t.Fatalf("%d %q, want the found answer", r.StatusCode, r.body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "session=s1" {
		t.Fatalf("the lookup's Cookie: %q, want only session=s1", got)
	}
}

// When no lookup settles the key within reconcile.for, then: release
// releases it: the caller hears so, and a retry executes it.
func TestNoLookupSettlesThenReleaseFreesTheKey(t *testing.T) {
	var posts atomic.Int64
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			http.Error(w, "lookup down", http.StatusServiceUnavailable)
			return
		}
		if posts.Add(1) == 1 {
			hangUp(w)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}, func(o *Options) {
		reviewPolicy(&o.Default)
		o.Default.Reconcile.Then = ThenRelease
		o.Default.Reconcile.After, o.Default.Reconcile.Every, o.Default.Reconcile.For = time.Millisecond, 20*time.Millisecond, 200*time.Millisecond
	})
	first := e.do(t, "POST", "/x", "k1", `{}`)
	if first.StatusCode != http.StatusBadGateway || strings.Contains(first.body, "being settled") {
		t.Fatalf("first caller: %d %q, want the 502 saying the key is released", first.StatusCode, first.body)
	}
	if r := e.do(t, "POST", "/x", "k1", `{}`); r.StatusCode != http.StatusCreated || r.replayed() {
		t.Fatalf("retry: %d %q, want it executed", r.StatusCode, r.body)
	}
	if e.probes(probeUnknown) < 1 {
		t.Error("no lookup was sent before then applied")
	}
}

// found_status replaces the lookup's own status in the recorded answer:
// the first caller and every retry get it, with the lookup's body.
func TestFoundStatusIsTheRecordedStatus(t *testing.T) {
	l := &chargeLedger{charges: map[string]bool{}}
	e := newEnv(t, l.serve, func(o *Options) {
		reviewPolicy(&o.Default)
		o.Default.Reconcile.FoundStatus = http.StatusCreated
		o.Default.Reconcile.After, o.Default.Reconcile.Every = time.Millisecond, 50*time.Millisecond
	})
	first := e.do(t, "POST", "/x", "k1", `{}`)
	retry := e.do(t, "POST", "/x", "k1", `{}`)
	for _, r := range []*response{first, retry} {
		if r.StatusCode != http.StatusCreated || r.body != `{"status":"succeeded"}` {
			t.Fatalf("%d %q, want 201 with the lookup's body", r.StatusCode, r.body)
		}
	}
}

// A proxy taking over a key being settled refuses a request with another
// payload (422 mismatch), as for any key: it neither looks up nor forwards.
func TestTakeOverOfAKeyBeingSettledRefusesAnotherPayload(t *testing.T) {
	var posts atomic.Int64
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			http.Error(w, "lookup down", http.StatusServiceUnavailable)
			return
		}
		posts.Add(1)
		hangUp(w)
	}
	pol := func(o *Options) {
		o.UpstreamTimeout = 500 * time.Millisecond
		reviewPolicy(&o.Default)
		o.Default.LockTTL = 300 * time.Millisecond
		o.Default.Reconcile.After, o.Default.Reconcile.Every = time.Millisecond, 50*time.Millisecond
	}
	pa := &partitioned{Store: st}
	a := newEnv(t, handler, pol, withStore(pa))
	kh := a.keyHash(t, "k1")
	aDone := make(chan *response, 1)
	go func() { aDone <- a.do(t, "POST", "/x", "k1", `{"amount":1}`) }()
	waitFor(t, func() bool { return a.probes(probeUnknown) >= 1 })
	// The settling proxy is cut off: it stops, its marker stays, and its
	// lease expires.
	pa.cut.Store(true)
	<-aDone
	waitFor(t, func() bool {
		_, err := st.Inspect(context.Background(), kh)
		return errors.Is(err, store.ErrNotFound)
	})
	b := newEnv(t, handler, pol, withStore(st), func(o *Options) { o.Upstream = a.up.url(t) })
	r := b.do(t, "POST", "/x", "k1", `{"amount":2}`)
	if r.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("another payload: %d %q, want 422", r.StatusCode, r.body)
	}
	if _, _, ok := b.handler.Settling(kh); ok {
		t.Error("b settles a key whose request it refused")
	}
	if n := posts.Load(); n != 1 {
		t.Errorf("posts = %d, want 1", n)
	}
	if _, err := st.Inspect(context.Background(), kh+ReconcileSuffix); err != nil {
		t.Errorf("the marker after the refused takeover: %v, want it kept", err)
	}
}

// A lookup that runs longer than lock_ttl (reconcile.every may exceed it)
// keeps the key's lease renewed: another proxy never takes the key over
// while it runs.
//
// A, B and their store share a fake clock, moved to each of A's renewals
// once A has armed it: however slowly the machine runs them, the lease
// cannot run out before one that was due. The lookup's own deadline
// (reconcile.every, at most upstream.timeout) is wall time: a minute, so
// that the lookup still runs when the clock has passed five lock_ttls.
func TestSlowLookupKeepsTheKeysLease(t *testing.T) {
	l := &chargeLedger{charges: map[string]bool{}}
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	var lookups atomic.Int64
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			lookups.Add(1)
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
			l.lookup(w, r)
			return
		}
		l.post()
		l.commit(r.Header.Get("Idempotency-Key"))
		hangUp(w)
	}
	const lockTTL = 300 * time.Millisecond
	clock := executiontest.NewFakeClock()
	mem := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { mem.Close() })
	pol := func(o *Options) {
		o.UpstreamTimeout = time.Minute
		reviewPolicy(&o.Default)
		o.Default.LockTTL = lockTTL
		o.Default.Reconcile.After, o.Default.Reconcile.Every = time.Millisecond, time.Minute
	}
	a := newEnv(t, handler, pol, withStore(mem))
	b := newEnv(t, nil, pol, withStore(mem), func(o *Options) { o.Upstream = a.up.url(t) })
	a.handler.clock, b.handler.clock = clock, clock
	// Before the servers close, which waits for a lookup held at the gate.
	t.Cleanup(release)

	aDone := sendUntilCleanup(t, a, "/v1/charges", "k1")
	advanceUntil(t, clock, lockTTL, "A's lookup sent", func() bool { return lookups.Load() >= 1 })
	// While A's lookup runs, B must answer 409 (being settled) and never
	// forward: five lock_ttls pass, a renewal of A's lease at a time.
	asked := clock.Now()
	for clock.Now().Before(asked.Add(5 * lockTTL)) {
		clock.AdvanceToNext(t, lockTTL, "the next renewal of A's lease while its lookup runs")
		if err := answersSettling(t, b, l); err != nil {
			t.Fatalf("%s into A's lookup: %v", clock.Now().Sub(asked), err)
		}
	}
	if n := lookups.Load(); n != 1 {
		t.Fatalf("lookups = %d, want 1: A's lookup ran throughout", n)
	}
	release()
	if r := advanceUntilAnswered(t, clock, lockTTL, "A's caller answered", aDone); r.StatusCode != http.StatusOK {
		t.Fatalf("A's caller: %d %q, want the found answer", r.StatusCode, r.body)
	}
	if posts, _ := l.counts(); posts != 1 {
		t.Fatalf("posts = %d, want 1", posts)
	}
}

// A marker still being written (its own lease in flight: a proxy writing
// it, or one that died doing so) says the key is being settled: the
// key's next request is answered 409 and never forwarded.
func TestMarkerBeingWrittenKeepsTheKeyFromExecuting(t *testing.T) {
	var posts atomic.Int64
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		w.WriteHeader(http.StatusCreated)
	}, func(o *Options) { reviewPolicy(&o.Default) }, withStore(st))
	mk := e.keyHash(t, "k1") + ReconcileSuffix
	if _, err := st.Begin(context.Background(), mk, store.Lease{}, time.Minute); err != nil {
		t.Fatal(err)
	}
	r := e.do(t, "POST", "/x", "k1", `{}`)
	if r.StatusCode != http.StatusConflict || !strings.Contains(r.body, "being settled") {
		t.Fatalf("%d %q, want 409 being settled", r.StatusCode, r.body)
	}
	if n := posts.Load(); n != 0 {
		t.Fatalf("posts = %d, want 0", n)
	}
}

// stillInFlight is an error while r is a 409: the key's lease has not
// expired yet, which nothing signals but the next answer.
func stillInFlight(r *response) error {
	if r.StatusCode == http.StatusConflict {
		return fmt.Errorf("still 409 %q", r.body)
	}
	return nil
}
