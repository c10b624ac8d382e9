package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// These tests talk to a plain server, without the proxy, to pin down the
// client's own decisions.

// serve starts a server answering every request with h and records the
// bodies it received.
func serve(t *testing.T, h http.HandlerFunc) (string, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), bodies...)
	}
}

func TestDoReturnsNonRetryableAnswers(t *testing.T) {
	tests := []struct {
		name   string
		status int
		header []string
	}{
		{"success", http.StatusCreated, nil},
		{"bad request", http.StatusBadRequest, []string{"Content-Type", "application/problem+json"}},
		{"not found", http.StatusNotFound, nil},
		{"upstream 422", http.StatusUnprocessableEntity, []string{"Content-Type", "application/problem+json"}},
		{"internal error", http.StatusInternalServerError, nil},
		{"replayed 503", http.StatusServiceUnavailable, []string{HeaderReplayed, "true"}},
		{"replayed 409", http.StatusConflict, []string{HeaderReplayed, "true"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const body = `{"type":"https://api.example/problems/invalid-card","status":422}`
			base, _ := serve(t, func(w http.ResponseWriter, _ *http.Request) {
				for i := 0; i+1 < len(tt.header); i += 2 {
					w.Header().Set(tt.header[i], tt.header[i+1])
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, body)
			})
			c, rt, _ := newTestClient(0)
			resp, err := c.Do(t.Context(), newCharge(t, base, "x"))
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			// The body must arrive whole even when the client peeked at it.
			if got := readAll(t, resp); got != body {
				t.Errorf("body = %q, want %q", got, body)
			}
			if got, want := rt.gotStatuses(), []int{tt.status}; !slices.Equal(got, want) {
				t.Errorf("attempt statuses = %v, want %v", got, want)
			}
		})
	}
}

func TestDoGivesUpAfterMaxAttempts(t *testing.T) {
	base, _ := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusBadGateway)
		io.WriteString(w, `{"type":"`+ProblemUpstreamUnreachable+`","status":502}`)
	})
	c, rt, sr := newTestClient(0)
	c.MaxAttempts = 3
	_, err := c.Do(t.Context(), newCharge(t, base, "x"))
	var re *RetryError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v, want *RetryError", err)
	}
	if re.Attempts != 3 || re.StatusCode != http.StatusBadGateway || !errors.Is(err, ErrAttemptsExhausted) {
		t.Errorf("RetryError = %+v, want 3 attempts, status 502, ErrAttemptsExhausted", re)
	}
	if re.Problem == nil || re.Problem.Type != ProblemUpstreamUnreachable {
		t.Errorf("Problem = %+v, want type %s", re.Problem, ProblemUpstreamUnreachable)
	}
	if got, want := len(sr.gotDelays()), 2; got != want {
		t.Errorf("waits = %d, want %d", got, want)
	}
	if keys := rt.gotKeys(); re.Key != keys[0] {
		t.Errorf("RetryError.Key = %q, want the attempts' key %q", re.Key, keys[0])
	}
	rt.assertRetriedBodiesClosed(t)
}

func TestDoStopsAtContextDeadline(t *testing.T) {
	tests := []struct {
		name       string
		handler    http.HandlerFunc
		wantStatus int
	}{
		// Retry-After (1s) outlasts the deadline (50ms): it expires in the wait.
		{"while waiting to retry", status(http.StatusServiceUnavailable, "Retry-After", "1"), http.StatusServiceUnavailable},
		// The server never answers: it expires in the attempt.
		{"during an attempt", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, _ := serve(t, tt.handler)
			c := &Client{MaxAttempts: 1000, MaxDelay: time.Minute}
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			defer cancel()
			_, err := c.Do(ctx, newCharge(t, base, "x"))
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want wrapping context.DeadlineExceeded", err)
			}
			var re *RetryError
			if !errors.As(err, &re) {
				t.Fatalf("err = %T, want *RetryError", err)
			}
			if re.StatusCode != tt.wantStatus || re.Attempts < 1 {
				t.Errorf("RetryError = %+v, want status %d and ≥1 attempt", re, tt.wantStatus)
			}
		})
	}
}

func TestDoReplaysBodyWithoutGetBody(t *testing.T) {
	var n int
	var mu sync.Mutex
	base, bodies := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		n++
		first := n == 1
		mu.Unlock()
		if first {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	c, _, _ := newTestClient(0)
	// io.MultiReader hides the concrete type, so NewRequest sets no GetBody.
	req, err := http.NewRequest(http.MethodPost, base, io.MultiReader(strings.NewReader("hello "), strings.NewReader("world")))
	if err != nil {
		t.Fatal(err)
	}
	if req.GetBody != nil {
		t.Fatal("test setup: request has GetBody")
	}
	resp, err := c.Do(t.Context(), req)
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	readAll(t, resp)
	if got, want := bodies(), []string{"hello world", "hello world"}; !slices.Equal(got, want) {
		t.Errorf("bodies received = %q, want %q", got, want)
	}
}

func TestDoRejectsBeforeSending(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(ctx context.Context, req *http.Request) context.Context
		body    io.Reader
		wantErr error
	}{
		{
			name:    "unreplayable body over the limit",
			body:    io.MultiReader(strings.NewReader(strings.Repeat("x", 11))),
			wantErr: ErrBodyTooLarge,
		},
		{
			name: "invalid key in header",
			prepare: func(ctx context.Context, req *http.Request) context.Context {
				req.Header.Set(HeaderKey, "bad\x7fkey")
				return ctx
			},
			wantErr: ErrInvalidKey,
		},
		{
			name: "empty key from context",
			prepare: func(ctx context.Context, _ *http.Request) context.Context {
				return WithKey(ctx, "")
			},
			wantErr: ErrInvalidKey,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, bodies := serve(t, status(http.StatusOK))
			c, _, _ := newTestClient(0)
			c.MaxBufferedBody = 10
			req, err := http.NewRequest(http.MethodPost, base, tt.body)
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			if tt.prepare != nil {
				ctx = tt.prepare(ctx, req)
			}
			resp, err := c.Do(ctx, req)
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
			if resp != nil {
				resp.Body.Close()
				t.Errorf("resp = %v, want nil", resp.Status)
			}
			if got := bodies(); len(got) != 0 {
				t.Errorf("server got %d requests, want 0", len(got))
			}
		})
	}
}

func TestReplayHeaders(t *testing.T) {
	tests := []struct {
		header           http.Header
		replayed, omited bool
	}{
		{http.Header{}, false, false},
		{http.Header{HeaderReplayed: {"true"}}, true, false},
		{http.Header{HeaderReplayed: {"true"}, HeaderBodyOmitted: {"true"}}, true, true},
		{http.Header{HeaderReplayed: {"false"}}, false, false},
	}
	for _, tt := range tests {
		resp := &http.Response{Header: tt.header}
		if got := Replayed(resp); got != tt.replayed {
			t.Errorf("Replayed(%v) = %v, want %v", tt.header, got, tt.replayed)
		}
		if got := BodyOmitted(resp); got != tt.omited {
			t.Errorf("BodyOmitted(%v) = %v, want %v", tt.header, got, tt.omited)
		}
	}
}
