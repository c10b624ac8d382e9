package proxy

import (
	"net/http"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/store/redisstore"
)

// The core rows of docs/request-handling.md against the Redis store: on miniredis, and on a
// real redis-server this test starts and kills.
func TestCoreCasesOnRedis(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		mr := miniredis.RunT(t)
		st, err := redisstore.NewFromClient(redis.NewClient(&redis.Options{Addr: mr.Addr()}), "", 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		coreCases(t, st, mr.Close)
	})
	t.Run("redis-server", func(t *testing.T) {
		srv := redistest.Start(t)
		st, err := redisstore.New(redisstore.Options{URL: srv.URL()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		coreCases(t, st, srv.Kill)
	})
}

func coreCases(t *testing.T, st Store, kill func()) {
	arrived, release := make(chan struct{}, 64), make(chan struct{})
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			arrived <- struct{}{}
			<-release
		}
		w.Write([]byte("done " + r.URL.Path))
	}, withStore(st))

	first := e.do(t, "POST", "/x", "k", `{"a":1}`)
	if again := e.do(t, "POST", "/x", "k", `{"a":1}`); !again.replayed() || again.body != first.body {
		t.Fatalf("replay: %d %q replayed=%v, want %q", again.StatusCode, again.body, again.replayed(), first.body)
	}
	if r := e.do(t, "POST", "/x", "k", `{"a":2}`); r.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("mismatch: got %d, want 422", r.StatusCode)
	}

	// Concurrent duplicates: exactly one execution.
	done := make(chan *response)
	go func() { done <- e.do(t, "POST", "/slow", "s", "{}") }()
	<-arrived
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := e.do(t, "POST", "/slow", "s", "{}"); r.StatusCode != http.StatusConflict {
				t.Errorf("duplicate in flight: got %d, want 409", r.StatusCode)
			}
		}()
	}
	wg.Wait()
	close(release)
	<-done
	if got := e.up.calls.Load(); got != 2 {
		t.Fatalf("executions = %d, want 2 (one per key)", got)
	}

	kill()
	if r := e.do(t, "POST", "/x", "new", "{}"); r.StatusCode != http.StatusServiceUnavailable || r.problemType() != "store-unavailable" {
		t.Fatalf("store down: got %d %s, want 503 store-unavailable", r.StatusCode, r.body)
	}
	if got := e.up.calls.Load(); got != 2 {
		t.Fatalf("upstream called while the store was down: %d executions", got)
	}
}
