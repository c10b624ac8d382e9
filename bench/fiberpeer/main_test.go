package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/gofiber/fiber/v3"
)

// startPeer runs the peer in front of a counting upstream and returns its
// base URL and the upstream's count of requests.
func startPeer(t *testing.T, redisURL string) (string, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		n := calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"n":`+strings.Repeat("1", int(n))+`}`)
	}))
	t.Cleanup(up.Close)
	app, err := newApp(up.URL, redisURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true}) }()
	t.Cleanup(func() {
		_ = app.Shutdown()
		<-done
	})
	return "http://" + ln.Addr().String(), &calls
}

func post(t *testing.T, base, key string) (status int, replayed bool, body string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/charges", strings.NewReader(`{"amount":1}`))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", string(b)
}

// TestPeerReplaysARetriedKeyAndMarksIt: on both storages a key's retry is
// answered from storage, marked Idempotent-Replayed, without reaching the
// upstream; a request without a key is forwarded every time; keys of 1 and
// 255 bytes are accepted and one of 256 is refused.
func TestPeerReplaysARetriedKeyAndMarksIt(t *testing.T) {
	mr := miniredis.RunT(t)
	for name, redisURL := range map[string]string{"memory": "", "redis": "redis://" + mr.Addr() + "/2"} {
		t.Run(name, func(t *testing.T) {
			base, calls := startPeer(t, redisURL)
			for _, key := range []string{"k", strings.Repeat("x", 255)} {
				before := calls.Load()
				st1, rep1, body1 := post(t, base, key)
				st2, rep2, body2 := post(t, base, key)
				if st1 != 200 || st2 != 200 || rep1 || !rep2 || body1 != body2 {
					t.Errorf("key of %d bytes: first %d replayed=%v, retry %d replayed=%v, bodies %q / %q; want a marked replay of the first",
						len(key), st1, rep1, st2, rep2, body1, body2)
				}
				if got := calls.Load() - before; got != 1 {
					t.Errorf("key of %d bytes: %d upstream calls, want 1", len(key), got)
				}
			}
			before := calls.Load()
			for range 2 {
				if st, rep, _ := post(t, base, ""); st != 200 || rep {
					t.Errorf("no key: status %d replayed=%v, want a forwarded 200", st, rep)
				}
			}
			if got := calls.Load() - before; got != 2 {
				t.Errorf("no key: %d upstream calls for 2 requests, want 2", got)
			}
			if st, _, _ := post(t, base, strings.Repeat("x", 256)); st < 400 {
				t.Errorf("key of 256 bytes: status %d, want it refused", st)
			}
		})
	}
}

func TestRedisStorageErrorIsNotAPanic(t *testing.T) {
	if _, err := newApp("http://127.0.0.1:1", "redis://%zz"); err == nil {
		t.Error("bad Redis URL: no error")
	}
}
