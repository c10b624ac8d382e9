package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// fakeStore is a store with the operator methods, over a map.
type fakeStore struct {
	mu       sync.Mutex
	entries  map[string]store.Entry
	pingErr  error
	opErr    error
	health   store.Health
	listArgs []any // state, cursor, limit of the last List
	next     string
}

func newFakeStore(entries ...store.Entry) *fakeStore {
	s := &fakeStore{entries: map[string]store.Entry{}, health: store.Health{Server: "fake"}}
	for _, e := range entries {
		s.entries[e.Key] = e
	}
	return s
}

func (s *fakeStore) Ping(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pingErr
}

func (s *fakeStore) Health(context.Context) (store.Health, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.health, nil
}

func (s *fakeStore) Inspect(_ context.Context, key string) (store.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opErr != nil {
		return store.Entry{}, s.opErr
	}
	e, ok := s.entries[key]
	if !ok {
		return store.Entry{}, store.ErrNotFound
	}
	return e, nil
}

func (s *fakeStore) Delete(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opErr != nil {
		return s.opErr
	}
	if _, ok := s.entries[key]; !ok {
		return store.ErrNotFound
	}
	delete(s.entries, key)
	return nil
}

func (s *fakeStore) List(_ context.Context, state store.State, cursor string, limit int) ([]store.Entry, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listArgs = []any{state, cursor, limit}
	if cursor == "bogus" {
		return nil, "", errors.New("list: malformed cursor \"bogus\"")
	}
	var out []store.Entry
	for _, e := range s.entries {
		if state == 0 || e.State == state {
			out = append(out, e)
		}
	}
	return out, s.next, nil
}

// pingOnly is a store without health or operator methods.
type pingOnly struct{}

func (pingOnly) Ping(context.Context) error { return nil }

// env is an admin handler over a fake store, with its logs and metrics.
type env struct {
	h     *Handler
	st    *fakeStore
	token *Token
	reg   *prometheus.Registry
	logs  *bytes.Buffer
}

const testToken = "s3cret-token"

func newEnv(t *testing.T, token string, opts ...func(*Options)) *env {
	t.Helper()
	e := &env{st: newFakeStore(), token: NewToken(token), reg: prometheus.NewRegistry(), logs: &bytes.Buffer{}}
	o := Options{
		Store:    e.st,
		Gatherer: e.reg,
		Metrics:  NewMetrics(e.reg),
		Token:    e.token,
		Logger:   slog.New(slog.NewJSONHandler(e.logs, nil)),
	}
	for _, f := range opts {
		f(&o)
	}
	e.h = New(o)
	return e
}

// do sends a request with the test token (auth "" sends none).
func (e *env) do(t *testing.T, method, target, auth, body string) *httptest.ResponseRecorder {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, rd)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	return rec
}

func (e *env) ops(op, result string) float64 {
	return testutil.ToFloat64(e.h.metrics.ops.WithLabelValues(op, result))
}

// problemOf decodes a problem+json answer, failing on anything else.
func problemOf(t *testing.T, rec *httptest.ResponseRecorder) problemBody {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json (body %q)", ct, rec.Body.String())
	}
	var p problemBody
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", rec.Body.String(), err)
	}
	if p.Status != rec.Code {
		t.Errorf("problem status %d, response status %d", p.Status, rec.Code)
	}
	return p
}

const bearer = "Bearer " + testToken

var _ http.Handler = (*Handler)(nil)
