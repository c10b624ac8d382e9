package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// blockingUpstream holds every request until release is closed, and reports
// each arrival on arrived.
func blockingUpstream(arrived chan<- struct{}, release <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("done"))
	}
}

func TestConcurrentDuplicatesReject(t *testing.T) {
	arrived, release := make(chan struct{}, 64), make(chan struct{})
	e := newEnv(t, blockingUpstream(arrived, release))

	first := make(chan *response)
	go func() { first <- e.do(t, "POST", "/x", "k", "{}") }()
	<-arrived // the first request holds the key

	const dups = 20
	var wg sync.WaitGroup
	results := make([]*response, dups)
	for i := range dups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = e.do(t, "POST", "/x", "k", "{}")
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.StatusCode != http.StatusConflict || r.problemType() != "in-flight" || r.Header.Get("Retry-After") == "" {
			t.Fatalf("duplicate %d: got %d %s (Retry-After %q), want 409 in-flight with Retry-After", i, r.StatusCode, r.body, r.Header.Get("Retry-After"))
		}
	}
	close(release)
	if r := <-first; r.StatusCode != http.StatusOK || r.body != "done" {
		t.Fatalf("first: %d %q", r.StatusCode, r.body)
	}
	if got := e.up.calls.Load(); got != 1 {
		t.Fatalf("executions = %d, want 1", got)
	}
	if r := e.do(t, "POST", "/x", "k", "{}"); !r.replayed() || r.body != "done" {
		t.Fatalf("after completion: %d %q replayed=%v, want the replay", r.StatusCode, r.body, r.replayed())
	}
	if got := e.outcomes(defaultRoute, OutcomeConflict); got != dups {
		t.Errorf("conflict = %v, want %d", got, dups)
	}
}

func TestInFlightMismatchIs422(t *testing.T) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	e := newEnv(t, blockingUpstream(arrived, release))
	done := make(chan struct{})
	go func() { e.do(t, "POST", "/x", "k", `{"a":1}`); close(done) }()
	<-arrived
	r := e.do(t, "POST", "/x", "k", `{"a":2}`)
	close(release)
	<-done
	if r.StatusCode != http.StatusUnprocessableEntity || r.problemType() != "payload-mismatch" {
		t.Fatalf("got %d %s, want 422 payload-mismatch", r.StatusCode, r.body)
	}
}

func TestConcurrentDuplicatesWait(t *testing.T) {
	arrived, release := make(chan struct{}, 64), make(chan struct{})
	e := newEnv(t, blockingUpstream(arrived, release), withPolicy(func(p *Policy) {
		p.Concurrent, p.WaitTimeout = ConcurrentWait, 30*time.Second
	}))
	const n = 32
	var wg sync.WaitGroup
	results := make([]*response, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = e.do(t, "POST", "/x", "k", "{}")
		}()
	}
	<-arrived
	// Every duplicate must be waiting before the first completes: the
	// in-flight gauge counts requests inside the handler.
	gaugeIs(t, "the in-flight gauge", e.handler.metrics.inflight, n)
	close(release)
	wg.Wait()
	replays := 0
	for i, r := range results {
		if r.StatusCode != http.StatusOK || r.body != "done" {
			t.Fatalf("request %d: %d %q, want 200 done", i, r.StatusCode, r.body)
		}
		if r.replayed() {
			replays++
		}
	}
	if got := e.up.calls.Load(); got != 1 {
		t.Fatalf("executions = %d, want 1", got)
	}
	if replays != n-1 {
		t.Fatalf("replays = %d, want %d", replays, n-1)
	}
}

func TestWaitTimeout(t *testing.T) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	e := newEnv(t, blockingUpstream(arrived, release), withPolicy(func(p *Policy) {
		p.Concurrent, p.WaitTimeout = ConcurrentWait, 50*time.Millisecond
	}))
	done := make(chan struct{})
	go func() { e.do(t, "POST", "/x", "k", "{}"); close(done) }()
	<-arrived
	r := e.do(t, "POST", "/x", "k", "{}")
	close(release)
	<-done
	if r.StatusCode != http.StatusConflict || r.Header.Get("Retry-After") == "" {
		t.Fatalf("got %d, want 409 with Retry-After after wait_timeout", r.StatusCode)
	}
	// It says since when the key has been running, as a rejected duplicate's does.
	if !strings.Contains(r.body, `"started_at":"`) || !strings.Contains(r.body, ", running since ") {
		t.Errorf("409 after wait_timeout = %s, want started_at and since when in the detail", r.body)
	}
}

// A waiter whose first request releases the key (a release status) executes
// the request itself instead of replaying "not processed".
func TestWaiterExecutesAfterRelease(t *testing.T) {
	arrived, release := make(chan struct{}, 2), make(chan struct{})
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		if r.Header.Get("X-Attempt") == "1" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("second"))
	}, withPolicy(func(p *Policy) { p.Concurrent, p.WaitTimeout = ConcurrentWait, 30*time.Second }))
	first := make(chan *response)
	go func() { first <- e.do(t, "POST", "/x", "k", "{}", "X-Attempt", "1") }()
	<-arrived
	second := make(chan *response)
	go func() { second <- e.do(t, "POST", "/x", "k", "{}", "X-Attempt", "2") }()
	gaugeIs(t, "the in-flight gauge (the second request waiting)", e.handler.metrics.inflight, 2)
	close(release)
	if r := <-first; r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("first: %d, want the upstream's 503", r.StatusCode)
	}
	if r := <-second; r.StatusCode != http.StatusOK || r.body != "second" || r.replayed() {
		t.Fatalf("second: %d %q replayed=%v, want its own execution", r.StatusCode, r.body, r.replayed())
	}
}

// Many keys, each sent by several clients at once, execute once per key,
// and every client gets that execution's response: duplicates wait for it
// (concurrent: wait), so every outcome is a real response, never a 409.
func TestManyKeysConcurrently(t *testing.T) {
	e := newEnv(t, nil, withPolicy(func(p *Policy) { p.Concurrent, p.WaitTimeout = ConcurrentWait, 30*time.Second }))
	const keys, perKey = 16, 8
	var wg sync.WaitGroup
	results := make([][]*response, keys)
	for k := range keys {
		results[k] = make([]*response, perKey)
		for i := range perKey {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[k][i] = e.do(t, "POST", "/x", "key-"+strconv.Itoa(k), "{}")
			}()
		}
	}
	wg.Wait()
	if got := e.up.calls.Load(); got != keys {
		t.Fatalf("executions = %d, want %d", got, keys)
	}
	executions := map[string]bool{}
	for k := range keys {
		fresh := 0
		for i, r := range results[k] {
			if r.StatusCode != http.StatusCreated || !strings.Contains(r.body, `"execution"`) {
				t.Fatalf("key %d, client %d: %d %q, want the upstream's 201", k, i, r.StatusCode, r.body)
			}
			if r.body != results[k][0].body {
				t.Fatalf("key %d: client %d got %q, client 0 %q: one key, two responses", k, i, r.body, results[k][0].body)
			}
			if !r.replayed() {
				fresh++
			}
		}
		if fresh != 1 {
			t.Fatalf("key %d: %d clients got a fresh execution, want 1", k, fresh)
		}
		if executions[results[k][0].body] {
			t.Fatalf("key %d got another key's response", k)
		}
		executions[results[k][0].body] = true
	}
}
