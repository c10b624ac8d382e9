package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// settle waits until every executed key of e's handler is settled.
func (e *env) settle(t *testing.T) {
	t.Helper()
	if err := e.handler.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// acceptAsync sends POST /x with key k1 and Prefer: respond-async, and the
// header fields kv, fails the test unless it is accepted (202), waits until
// the key is settled and returns the status URL.
func (e *env) acceptAsync(t *testing.T, kv ...string) string {
	t.Helper()
	r := e.do(t, "POST", "/x", "k1", "{}", append([]string{"Prefer", "respond-async"}, kv...)...)
	if r.StatusCode != http.StatusAccepted {
		t.Fatalf("%d %s, want 202", r.StatusCode, r.body)
	}
	e.settle(t)
	return r.Header.Get("Location")
}

func TestPollOfARequestReleasedByTheUpstreamAnswersItsReleaseStatus(t *testing.T) {
	var processed atomic.Int64
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		if processed.Load() == 0 && r.Header.Get("X-Ready") == "" {
			w.Header().Set("Retry-After", "2")
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusServiceUnavailable) // in release_statuses: not processed
			w.Write([]byte("busy"))
			return
		}
		processed.Add(1)
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"done":true}`))
	}, func(o *Options) { o.AsyncSecret, o.Default.Async = testAsyncSecret, AsyncAllow })

	loc := e.acceptAsync(t)

	p := e.poll(t, loc)
	if p.StatusCode != http.StatusServiceUnavailable || p.Header.Get(ReleasedHeader) != "true" || p.replayed() {
		t.Fatalf("poll of the released request: %d %s=%q replayed=%v %s, want the upstream's 503 marked released, not replayed",
			p.StatusCode, ReleasedHeader, p.Header.Get(ReleasedHeader), p.replayed(), p.body)
	}
	if got := p.Header.Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After %q, want the upstream's 2", got)
	}
	if again := e.poll(t, loc); again.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("second poll: %d, want the note again", again.StatusCode)
	}

	// The client sends the request again with its key: it executes.
	if got := e.acceptAsync(t, "X-Ready", "1"); got != loc {
		t.Fatalf("resend: Location %q, want %q", got, loc)
	}
	done := e.poll(t, loc)
	if done.StatusCode != http.StatusCreated || !done.replayed() || done.Header.Get(ReleasedHeader) != "" {
		t.Fatalf("poll after the resend: %d replayed=%v released=%q, want the recorded 201",
			done.StatusCode, done.replayed(), done.Header.Get(ReleasedHeader))
	}
	if n := processed.Load(); n != 1 {
		t.Errorf("the operation ran %d times, want 1", n)
	}
}

func TestPollOfARequestWhoseUpstreamWasUnreachableAnswers502(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there until the resend
	e := newEnv(t, nil, func(o *Options) {
		o.Upstream.Host = addr
		o.AsyncSecret, o.Default.Async = testAsyncSecret, AsyncAllow
	})

	loc := e.acceptAsync(t)
	p := e.poll(t, loc)
	if p.StatusCode != http.StatusBadGateway || p.problemType() != "upstream-unreachable" || p.Header.Get(ReleasedHeader) != "true" || p.replayed() {
		t.Fatalf("poll: %d %s released=%q replayed=%v, want 502 upstream-unreachable marked released",
			p.StatusCode, p.body, p.Header.Get(ReleasedHeader), p.replayed())
	}

	// The upstream is back; the client sends the request again with its key.
	var processed atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		processed.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	if up.Listener, err = net.Listen("tcp", addr); err != nil {
		t.Fatal(err)
	}
	up.Start()
	t.Cleanup(up.Close)
	e.acceptAsync(t)
	if done := e.poll(t, loc); done.StatusCode != http.StatusCreated || !done.replayed() {
		t.Fatalf("poll after the resend: %d %s, want the recorded 201", done.StatusCode, done.body)
	}
	if n := processed.Load(); n != 1 {
		t.Errorf("the operation ran %d times, want 1", n)
	}
}

func TestReleasedNoteIsNeverTheKeys(t *testing.T) {
	var calls atomic.Int64
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}, func(o *Options) { o.AsyncSecret, o.Default.Async = testAsyncSecret, AsyncAllow })
	loc := e.acceptAsync(t, "Authorization", "Bearer alice")
	if p := e.poll(t, loc, "Authorization", "Bearer mallory"); p.StatusCode != http.StatusNotFound || p.problemType() != "status-unknown" {
		t.Errorf("poll with another scope: %d %s, want 404 status-unknown", p.StatusCode, p.body)
	}
	// A synchronous retry with the key executes: the note is the status URL's.
	if r := e.do(t, "POST", "/x", "k1", "{}", "Authorization", "Bearer alice"); r.StatusCode != http.StatusCreated || r.replayed() {
		t.Fatalf("retry with the key: %d replayed=%v, want a new execution's 201", r.StatusCode, r.replayed())
	}
	if p := e.poll(t, loc, "Authorization", "Bearer alice"); p.StatusCode != http.StatusCreated || !p.replayed() {
		t.Errorf("poll once the key is recorded again: %d %s, want the record, not the note", p.StatusCode, p.body)
	}
}

// noteRefusingStore is a memory store that has no room for released notes.
type noteRefusingStore struct{ *memory.Store }

func (s noteRefusingStore) Begin(ctx context.Context, key string, l store.Lease, ttl time.Duration) (store.BeginResult, error) {
	if strings.HasSuffix(key, store.ReleasedSuffix) {
		return store.BeginResult{}, errors.Join(store.ErrFull, errors.New("no room"))
	}
	return s.Store.Begin(ctx, key, l, ttl)
}

func TestPollOfAReleasedRequestWhoseNoteTheStoreCouldNotKeepIs404(t *testing.T) {
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}, withStore(noteRefusingStore{st}), func(o *Options) { o.AsyncSecret, o.Default.Async = testAsyncSecret, AsyncAllow })
	if p := e.poll(t, e.acceptAsync(t)); p.StatusCode != http.StatusNotFound || p.problemType() != "status-unknown" {
		t.Errorf("poll: %d %s, want 404 status-unknown", p.StatusCode, p.body)
	}
	if r := e.do(t, "POST", "/x", "k1", "{}"); r.StatusCode != http.StatusServiceUnavailable || r.replayed() {
		t.Errorf("retry with the key: %d, want executed again (the key was released)", r.StatusCode)
	}
}

func TestPollOfARequestWhoseUpstreamFailedUnderReleaseAnswersItsProblem(t *testing.T) {
	var calls atomic.Int64
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close() // the request was sent, no answer came back
			}
			return
		}
		w.WriteHeader(http.StatusCreated)
	}, func(o *Options) {
		o.AsyncSecret, o.Default.Async = testAsyncSecret, AsyncAllow
		o.Default.OnUpstreamError = UpstreamErrorRelease
	})
	loc := e.acceptAsync(t)
	p := e.poll(t, loc)
	if p.StatusCode != http.StatusBadGateway || p.problemType() != "upstream-failed" || p.Header.Get(ReleasedHeader) != "true" {
		t.Fatalf("poll: %d %s released=%q, want 502 upstream-failed marked released", p.StatusCode, p.body, p.Header.Get(ReleasedHeader))
	}
	e.acceptAsync(t)
	if done := e.poll(t, loc); done.StatusCode != http.StatusCreated || !done.replayed() {
		t.Fatalf("poll after the resend: %d %s, want the recorded 201", done.StatusCode, done.body)
	}
}

// A request released again after its resend leaves the newer answer at
// its status URL: the earlier note is replaced, not kept.
func TestReleaseOfAResentRequestReplacesItsNote(t *testing.T) {
	var calls atomic.Int64
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", strconv.FormatInt(calls.Add(1), 10))
		w.WriteHeader(http.StatusServiceUnavailable)
	}, func(o *Options) { o.AsyncSecret, o.Default.Async = testAsyncSecret, AsyncAllow })
	loc := e.acceptAsync(t)
	if p := e.poll(t, loc); p.StatusCode != http.StatusServiceUnavailable || p.Header.Get("Retry-After") != "1" {
		t.Fatalf("poll: %d Retry-After %q, want the first 503's 1", p.StatusCode, p.Header.Get("Retry-After"))
	}
	if got := e.acceptAsync(t); got != loc {
		t.Fatalf("resend: Location %q, want %q", got, loc)
	}
	if p := e.poll(t, loc); p.StatusCode != http.StatusServiceUnavailable || p.Header.Get("Retry-After") != "2" || p.Header.Get(ReleasedHeader) != "true" {
		t.Fatalf("poll after the resend: %d Retry-After %q released=%q, want the second 503's 2 marked released",
			p.StatusCode, p.Header.Get("Retry-After"), p.Header.Get(ReleasedHeader))
	}
}

// The warning that a poll will answer 404 is logged only for a note the
// store did not keep.
func TestReleasedNoteTheStoreKeptIsNotWarnedLost(t *testing.T) {
	var logs lockedBuffer
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}, withLog(&logs), func(o *Options) { o.AsyncSecret, o.Default.Async = testAsyncSecret, AsyncAllow })
	if p := e.poll(t, e.acceptAsync(t)); p.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("poll: %d %s, want the note's 503", p.StatusCode, p.body)
	}
	if got := logs.lines(t, "could not keep the answer of a released"); len(got) != 0 {
		t.Errorf("a kept note was warned lost: %v", got)
	}
}

// A retry with respond-async while a request without it runs is answered
// 202 with the status URL, though the running call is attached to its own
// client: when that call's key is released, the poll still answers what
// the request was told, not a 404 that says to stop.
func TestPollOfARetryAcceptedWhileASynchronousCallRanAnswersItsRelease(t *testing.T) {
	arrived, release := make(chan struct{}, 8), make(chan struct{})
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusServiceUnavailable) // in release_statuses: not processed
	}, func(o *Options) { o.AsyncSecret, o.Default.Async = testAsyncSecret, AsyncAllow })

	again := retryAcceptedWhileTheFirstRuns(t, e, e, arrived, release, http.StatusServiceUnavailable)
	pollAnswersTheRelease(t, e, again)
}

// A released key leaves a note only where a status URL was given: a route
// that allows respond-async on a handler without a secret (respond-async
// off) gives none, and writes no note its release would never be asked
// for; with the secret, a release writes one when its client was answered
// 202, none when its client waited for the answer and was told it.
func TestReleaseLeavesANoteOnlyWhereAStatusURLWasGiven(t *testing.T) {
	for _, tt := range []struct {
		name   string
		secret []byte
		prefer string
		notes  int64
	}{
		{"without a secret", nil, "respond-async", 0},
		{"with a secret, its client answered 202", testAsyncSecret, "respond-async", 1},
		{"with a secret, its client waiting", testAsyncSecret, "", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := &noteCounting{Store: memory.New(memory.Options{})}
			t.Cleanup(func() { st.Close() })
			var calls atomic.Int64
			e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.WriteHeader(http.StatusServiceUnavailable)
			}, withStore(st), func(o *Options) { o.AsyncSecret, o.Default.Async = tt.secret, AsyncAllow })
			e.do(t, "POST", "/x", "k1", "{}", "Prefer", tt.prefer)
			// The key's next request is executed once the key is released,
			// which its note, if any, comes before.
			wait.SucceedsSoon(t, 10*time.Second, func() error {
				return stillInFlight(e.do(t, "POST", "/x", "k1", "{}"))
			})
			e.settle(t)
			if n := calls.Load(); n != 2 {
				t.Fatalf("upstream calls = %d, want 2: the key was not released", n)
			}
			if n := st.notes.Load(); n != tt.notes {
				t.Errorf("released notes written = %d, want %d", n, tt.notes)
			}
			if n := st.reads.Load(); tt.secret == nil && n != 0 {
				t.Errorf("notes and marks read = %d, want 0: without a secret no status URL is given", n)
			}
		})
	}
}

// A burst of release statuses answered to clients that wait for them, on
// a route that allows respond-async, writes nothing to the store beyond
// the keys themselves: no client was given a status URL to poll.
func TestBurstOfSynchronousReleasesWritesNoNote(t *testing.T) {
	st := &noteCounting{Store: memory.New(memory.Options{})}
	t.Cleanup(func() { st.Close() })
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
	}, withStore(st), func(o *Options) { o.AsyncSecret, o.Default.Async = testAsyncSecret, AsyncAllow })
	for i := range 50 {
		if r := e.do(t, "POST", "/x", "k"+strconv.Itoa(i), "{}"); r.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("request %d: %d, want the upstream's 503", i, r.StatusCode)
		}
	}
	e.settle(t)
	if n := st.notes.Load(); n != 0 {
		t.Errorf("released notes written = %d, want 0", n)
	}
}

// A retry given the 202 by another proxy sharing the store, while the
// first proxy's call ran with its client waiting, marks its status URL
// given there: the first proxy's release reads the mark and keeps the
// note, and the poll answers what the request was told.
func TestPollOfARetryAcceptedByAnotherProxyAnswersTheRelease(t *testing.T) {
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	arrived, release := make(chan struct{}, 8), make(chan struct{})
	async := func(o *Options) { o.AsyncSecret, o.Default.Async = testAsyncSecret, AsyncAllow }
	a := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusServiceUnavailable) // in release_statuses: not processed
	}, withStore(st), async)
	b := newEnv(t, nil, withStore(st), async)

	again := retryAcceptedWhileTheFirstRuns(t, a, b, arrived, release, http.StatusServiceUnavailable)
	pollAnswersTheRelease(t, b, again)
	if n := b.up.calls.Load(); n != 0 {
		t.Errorf("the other proxy's upstream was called %d times, want 0", n)
	}
}

// noteCounting is a memory store that counts the released notes begun.
type noteCounting struct {
	*memory.Store
	notes atomic.Int64 // notes and marks begun
	reads atomic.Int64 // notes and marks read
}

func (s *noteCounting) Inspect(ctx context.Context, key string) (store.Entry, error) {
	if strings.HasSuffix(key, store.ReleasedSuffix) {
		s.reads.Add(1)
	}
	return s.Store.Inspect(ctx, key)
}

func (s *noteCounting) Begin(ctx context.Context, key string, l store.Lease, ttl time.Duration) (store.BeginResult, error) {
	if strings.HasSuffix(key, store.ReleasedSuffix) {
		s.notes.Add(1)
	}
	return s.Store.Begin(ctx, key, l, ttl)
}

// A retry that marks its status URL given between the releasing call's
// first read of the mark and its release was given the 202 while the key
// was held: the call reads the mark again once the key is released, and
// keeps the note the retry's poll answers.
func TestRetryMarkedJustBeforeTheReleaseGetsTheNote(t *testing.T) {
	st := &markRace{Store: memory.New(memory.Options{})}
	t.Cleanup(func() { st.Close() })
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable) // in release_statuses: not processed
	}, withStore(st), func(o *Options) { o.AsyncSecret, o.Default.Async = testAsyncSecret, AsyncAllow })
	accepted := make(chan *http.Response, 1)
	st.mark = urlGivenKey(e.keyHash(t, "k1"))
	st.between = func() {
		// The call's first read found no mark; the retry comes now.
		req := e.request(t, context.Background(), "/x", "k1")
		req.Header.Set("Prefer", "respond-async")
		res, err := e.srv.Client().Do(req)
		if err != nil {
			accepted <- nil
			return
		}
		res.Body.Close()
		accepted <- res
	}
	if r := e.do(t, "POST", "/x", "k1", "{}"); r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("first request: %d, want the upstream's 503", r.StatusCode)
	}
	e.settle(t)
	again := <-accepted
	if again == nil || again.StatusCode != http.StatusAccepted {
		t.Fatalf("retry while the key was held: %v, want 202", again)
	}
	p := e.poll(t, again.Header.Get("Location"))
	if p.StatusCode != http.StatusServiceUnavailable || p.Header.Get(ReleasedHeader) != "true" {
		t.Fatalf("poll of the accepted retry: %d %s=%q %s, want the upstream's 503 marked released",
			p.StatusCode, ReleasedHeader, p.Header.Get(ReleasedHeader), p.body)
	}
}

// A poll that comes after the release freed the key and before the late
// note is written is of a request the proxy still owes an answer: it waits
// the moment the note takes and answers it, never 404 status-unknown,
// which would have its client stop and drop the operation.
func TestPollBetweenAReleaseAndItsLateNoteIsAnsweredTheNote(t *testing.T) {
	st := &markRace{Store: memory.New(memory.Options{}), noteGate: make(chan struct{})}
	t.Cleanup(func() { st.Close() })
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable) // in release_statuses: not processed
	}, withStore(st), func(o *Options) { o.AsyncSecret, o.Default.Async = testAsyncSecret, AsyncAllow })
	var loc string
	st.mark = urlGivenKey(e.keyHash(t, "k1"))
	st.between = func() {
		req := e.request(t, context.Background(), "/x", "k1")
		req.Header.Set("Prefer", "respond-async")
		if res, err := e.srv.Client().Do(req); err == nil {
			res.Body.Close()
			loc = res.Header.Get("Location")
		}
	}
	type polled struct {
		status   int
		released string
		err      error
	}
	inGap := make(chan polled, 1)
	st.released = func() {
		// The key is free; the note is held back (noteGate) until this
		// poll has found none.
		go func() {
			res, err := e.srv.Client().Get(e.srv.URL + loc)
			if err != nil {
				inGap <- polled{err: err}
				return
			}
			res.Body.Close()
			inGap <- polled{status: res.StatusCode, released: res.Header.Get(ReleasedHeader)}
		}()
	}
	if r := e.do(t, "POST", "/x", "k1", "{}"); r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("first request: %d, want the upstream's 503", r.StatusCode)
	}
	e.settle(t)
	if p := <-inGap; p.err != nil || p.status != http.StatusServiceUnavailable || p.released != "true" {
		t.Fatalf("poll after the release, before its note: %d %s=%q (%v), want the upstream's 503 marked released",
			p.status, ReleasedHeader, p.released, p.err)
	}
}

// markRace is a memory store that runs between once, right after the
// first read of the mark key finds nothing, before that read returns, and
// released, when set, once a Release has freed a key.
type markRace struct {
	*memory.Store
	mark     string
	between  func()
	released func()
	once     atomic.Bool
	// noteGate, when set, holds a note's Begin until a read of a note
	// found none (closed once).
	noteGate   chan struct{}
	noteMissed atomic.Bool
}

// isNote reports whether key is a released note's: a key of the notes'
// suffix that is not the mark's.
func (s *markRace) isNote(key string) bool {
	return strings.HasSuffix(key, store.ReleasedSuffix) && key != s.mark
}

func (s *markRace) Begin(ctx context.Context, key string, l store.Lease, ttl time.Duration) (store.BeginResult, error) {
	if s.noteGate != nil && s.isNote(key) {
		select {
		case <-s.noteGate:
		case <-time.After(10 * time.Second):
		}
	}
	return s.Store.Begin(ctx, key, l, ttl)
}

func (s *markRace) Release(ctx context.Context, key, token string) error {
	err := s.Store.Release(ctx, key, token)
	if s.released != nil && err == nil {
		s.released()
	}
	return err
}

func (s *markRace) Inspect(ctx context.Context, key string) (store.Entry, error) {
	e, err := s.Store.Inspect(ctx, key)
	if key == s.mark && errors.Is(err, store.ErrNotFound) && !s.once.Swap(true) {
		s.between()
	}
	if s.noteGate != nil && s.isNote(key) && errors.Is(err, store.ErrNotFound) && !s.noteMissed.Swap(true) {
		close(s.noteGate)
	}
	return e, err
}

// A release that keeps no note (the upstream marked its answer no-store)
// leaves a retry given the status URL while the call ran its 404 once the
// key is free, as the docs say: its mark promises a note that never comes,
// and must not keep the poll answered 202 until the mark expires.
func TestPollOfAMarkedReleaseThatKeepsNoNoteIs404(t *testing.T) {
	arrived, release := make(chan struct{}, 8), make(chan struct{})
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.Header().Set("Idempotency-Control", "no-store")
		w.WriteHeader(http.StatusOK)
	}, func(o *Options) { o.AsyncSecret, o.Default.Async = testAsyncSecret, AsyncAllow })

	again := retryAcceptedWhileTheFirstRuns(t, e, e, arrived, release, http.StatusOK)

	// The poll waits a moment for a note that may be on its way, never
	// as long as the mark lives: bounded here, so that waiting on is a
	// failure, not a hang.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if p := e.doCtx(t, ctx, "GET", again.Header.Get("Location"), "", ""); p.StatusCode != http.StatusNotFound {
		t.Fatalf("poll of the accepted retry once its key is free, no note kept: %d %s, want 404", p.StatusCode, p.body)
	}
}

// retryAcceptedWhileTheFirstRuns sends k1 through first's proxy and, once
// its call reached the upstream (arrived), a retry with respond-async
// through retry's, which must be given its 202; then lets the call answer
// (release), checks first's client was told status, waits until first's
// key is settled and returns the retry's 202.
func retryAcceptedWhileTheFirstRuns(t *testing.T, first, retry *env, arrived, release chan struct{}, status int) *response {
	t.Helper()
	answered := make(chan *response, 1)
	go func() { answered <- first.do(t, "POST", "/x", "k1", "{}") }()
	<-arrived
	again := retry.do(t, "POST", "/x", "k1", "{}", "Prefer", "respond-async")
	if again.StatusCode != http.StatusAccepted {
		t.Fatalf("retry with respond-async while the first runs: %d %s, want 202", again.StatusCode, again.body)
	}
	close(release)
	if r := <-answered; r.StatusCode != status {
		t.Fatalf("first request: %d, want the upstream's %d", r.StatusCode, status)
	}
	first.settle(t)
	return again
}

// pollAnswersTheRelease polls the status URL of again, a 202, through e,
// and wants the upstream's 503 marked released.
func pollAnswersTheRelease(t *testing.T, e *env, again *response) {
	t.Helper()
	p := e.poll(t, again.Header.Get("Location"))
	if p.StatusCode != http.StatusServiceUnavailable || p.Header.Get(ReleasedHeader) != "true" {
		t.Fatalf("poll of the accepted retry: %d %s=%q %s, want the upstream's 503 marked released",
			p.StatusCode, ReleasedHeader, p.Header.Get(ReleasedHeader), p.body)
	}
}
