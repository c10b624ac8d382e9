package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// Request headers that tell the test upstream how to behave. The proxy
// forwards them unchanged and they are not fingerprinted, so a retry with
// the same key can ask for different behaviour.
const (
	hdrSleep  = "X-Test-Sleep"  // a duration the handler works before answering
	hdrHold   = "X-Test-Hold"   // "1": wait until upstream.Unhold
	hdrDrop   = "X-Test-Drop"   // "1": close the connection after reading the request
	hdrStatus = "X-Test-Status" // status code to answer with (default 201)
	hdrPad    = "X-Test-Pad"    // bytes of padding appended to the body
)

// execution is one request the upstream received in full and acted on.
type execution struct {
	Seq  int    // global sequence number, unique per execution
	Body string // the response body it answered (or would have answered)
	At   time.Time
	Work time.Duration // the simulated work it was asked for (hdrSleep)
}

// upstream is an in-process HTTP service that counts executions per
// idempotency key and answers a body derived from a global counter, so a
// second execution of a key is always detectable. It can be killed (its
// listener and every connection closed) and restarted on the same address.
type upstream struct {
	t    testing.TB
	addr string

	mu      sync.Mutex
	srv     *http.Server
	dead    chan struct{} // closed by Kill: held handlers return
	hold    chan struct{} // closed by Unhold
	execs   map[string][]execution
	seq     int
	changed chan struct{} // closed and replaced on every execution
	running sync.WaitGroup
}

// startUpstream serves on a free loopback port until the test ends.
func startUpstream(t testing.TB) *upstream {
	t.Helper()
	u := &upstream{
		t:       t,
		execs:   map[string][]execution{},
		changed: make(chan struct{}),
		hold:    make(chan struct{}),
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("upstream listen: %v", err)
	}
	u.addr = l.Addr().String()
	u.serve(l)
	t.Cleanup(u.Kill)
	return u
}

// URL is the upstream's base URL.
func (u *upstream) URL() string { return "http://" + u.addr }

func (u *upstream) serve(l net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(u.handle), ReadHeaderTimeout: 5 * time.Second}
	u.mu.Lock()
	u.srv, u.dead = srv, make(chan struct{})
	u.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
}

// Kill closes the listener and every connection, like a crashed process,
// and waits for the handlers to return. Requests in progress never get
// their response. A no-op when already down.
func (u *upstream) Kill() {
	u.mu.Lock()
	srv, dead := u.srv, u.dead
	u.srv = nil
	u.mu.Unlock()
	if srv == nil {
		return
	}
	// Connections first: a handler woken by dead must find no connection
	// left to answer on, or net/http would send an empty 200 for it.
	_ = srv.Close()
	close(dead)
	u.running.Wait()
}

// Restart listens again on the same address.
func (u *upstream) Restart() {
	u.t.Helper()
	u.Kill()
	var l net.Listener
	var err error
	// The port was ours a moment ago; the kernel may take a moment to let go.
	err = wait.SoonError(5*time.Second, func() (err error) {
		l, err = net.Listen("tcp", u.addr)
		return err
	})
	if err != nil {
		u.t.Fatalf("upstream relisten on %s: %v", u.addr, err)
	}
	u.serve(l)
}

// Unhold releases every request holding on hdrHold, now and later.
func (u *upstream) Unhold() {
	u.mu.Lock()
	defer u.mu.Unlock()
	select {
	case <-u.hold:
	default:
		close(u.hold)
	}
}

// Execs returns a copy of the executions of key.
func (u *upstream) Execs(key string) []execution {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]execution(nil), u.execs[key]...)
}

// Count is the number of executions of key.
func (u *upstream) Count(key string) int { return len(u.Execs(key)) }

// Total is the number of executions of all keys.
func (u *upstream) Total() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seq
}

// AllExecs returns a copy of every key's executions.
func (u *upstream) AllExecs() map[string][]execution {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make(map[string][]execution, len(u.execs))
	for k, v := range u.execs {
		out[k] = append([]execution(nil), v...)
	}
	return out
}

// WaitCount waits until key has at least n executions.
func (u *upstream) WaitCount(key string, n int, timeout time.Duration) {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		u.mu.Lock()
		got, changed := len(u.execs[key]), u.changed
		u.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			u.t.Fatalf("upstream: key %q has %d executions after %v, want %d", key, got, timeout, n)
		}
	}
}

func (u *upstream) handle(w http.ResponseWriter, r *http.Request) {
	u.running.Add(1)
	defer u.running.Done()
	reqBody, err := io.ReadAll(r.Body)
	if err != nil {
		return // the request never arrived in full: not an execution
	}
	key := r.Header.Get("Idempotency-Key")
	status := http.StatusCreated
	if s, err := strconv.Atoi(r.Header.Get(hdrStatus)); err == nil {
		status = s
	}

	pad, _ := strconv.Atoi(r.Header.Get(hdrPad))
	work, workErr := time.ParseDuration(r.Header.Get(hdrSleep))

	u.mu.Lock()
	u.seq++
	seq := u.seq
	body := fmt.Sprintf(`{"key":%q,"exec":%d,"nth":%d,"request":%q}`+"\n",
		key, u.seq, len(u.execs[key])+1, reqBody) + strings.Repeat(".", pad)
	u.execs[key] = append(u.execs[key], execution{Seq: u.seq, Body: body, At: time.Now(), Work: work})
	close(u.changed)
	u.changed = make(chan struct{})
	dead, hold := u.dead, u.hold
	u.mu.Unlock()

	if workErr == nil {
		select {
		case <-time.After(work): // the upstream's simulated work
		case <-dead:
			panic(http.ErrAbortHandler) // crashed: no response at all
		}
	}
	if r.Header.Get(hdrHold) == "1" {
		select {
		case <-hold:
		case <-dead:
			panic(http.ErrAbortHandler)
		}
	}
	if r.Header.Get(hdrDrop) == "1" {
		// The request was read and acted on; the answer is lost.
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Exec", strconv.Itoa(seq))
	w.Header().Set("Set-Cookie", "session=upstream")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// onlyExecution fails the test unless key was executed exactly once, and
// returns that execution.
func (u *upstream) onlyExecution(t testing.TB, key string) execution {
	t.Helper()
	ex := u.Execs(key)
	if len(ex) != 1 {
		t.Fatalf("key %q: %d upstream executions, want 1", key, len(ex))
	}
	return ex[0]
}
