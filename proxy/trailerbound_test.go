package proxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/store/filestore"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
	"github.com/idempotency-proxy/idempotency-proxy/store/redisstore"
)

// An upstream's trailers count toward max_response_body as its body does:
// over HTTP/2 an upstream may send megabytes of them (up to the transport's
// 10 MiB header bound), and a record holding them would be that much over
// the route's bound. Such an answer reaches its first caller whole and is
// recorded as one whose body is too large: without its body and trailers.
func TestTrailersCountTowardMaxResponseBody(t *testing.T) {
	envOverH2C = true // the client reads trailers this large only over HTTP/2
	t.Cleanup(func() { envOverH2C = false })
	const limit, trailers = 4 << 10, 64
	var runs atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("ok"))
		for i := range trailers {
			w.Header().Set(http.TrailerPrefix+fmt.Sprintf("X-Big-%d", i), strings.Repeat("a", 1<<10))
		}
	}))
	up.Config.Protocols = new(http.Protocols)
	up.Config.Protocols.SetUnencryptedHTTP2(true)
	up.Start()
	t.Cleanup(up.Close)
	u, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(http.ResponseWriter, *http.Request) {},
		withPolicy(func(p *Policy) { p.MaxResponseBody = limit }),
		func(o *Options) { o.Upstream, o.UpstreamProtocol = u, UpstreamH2C })

	first := e.do(t, "POST", "/x", "k", "{}")
	if first.StatusCode != http.StatusCreated || first.body != "ok" || len(first.Trailer) != trailers {
		t.Fatalf("first: %d %q with %d trailers, want 201 ok with all %d", first.StatusCode, first.body, len(first.Trailer), trailers)
	}
	replay := e.do(t, "POST", "/x", "k", "{}")
	if replay.StatusCode != http.StatusCreated || replay.Header.Get("Idempotent-Replayed") != "true" || runs.Load() != 1 {
		t.Fatalf("replay: %d replayed=%q after %d runs, want a 201 replay after 1", replay.StatusCode, replay.Header.Get("Idempotent-Replayed"), runs.Load())
	}
	size := int64(len(replay.body)) + fieldsSize(replay.Trailer)
	if size > limit {
		t.Fatalf("replay carries %d bytes of body and trailers, over max_response_body %d", size, limit)
	}
}

// replay_exclude_headers holds for trailers too: a Set-Cookie the upstream
// sent after the body (a session it issued to the first caller) is
// recorded but never replayed to a retry, as in the header section.
func TestReplayExcludeHeadersHoldForTrailers(t *testing.T) {
	e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "Set-Cookie, X-Checksum")
		w.Write([]byte("ok"))
		w.Header().Set("Set-Cookie", "session=first-caller")
		w.Header().Set("X-Checksum", "c1")
	})
	first := e.do(t, "POST", "/x", "k", "{}")
	if first.Trailer.Get("Set-Cookie") != "session=first-caller" {
		t.Fatalf("first caller's trailers %v, want its Set-Cookie", first.Trailer)
	}
	replay := e.do(t, "POST", "/x", "k", "{}")
	if replay.Header.Get("Idempotent-Replayed") != "true" || replay.Trailer.Get("X-Checksum") != "c1" {
		t.Fatalf("replay: replayed=%q trailers %v, want a replay with X-Checksum", replay.Header.Get("Idempotent-Replayed"), replay.Trailer)
	}
	if v, ok := replay.Trailer["Set-Cookie"]; ok {
		t.Fatalf("replay carries the first caller's Set-Cookie %q in its trailers", v)
	}
}

// An answer whose header, body and trailers come to exactly
// max_response_body is recorded whole, trailers included; one byte more
// and its body and trailers are left out.
func TestAnswerOfExactlyTheRecordLimitWithTrailersIsRecordedWhole(t *testing.T) {
	const limit = 1024
	// What the record counts of each field: name, value, ": " and CRLF.
	fixed := len("Content-Type") + len("text/plain") + 4 + len("ok") + len("X-Sum") + 4
	for name, over := range map[string]int{"exactly the limit": 0, "one byte over": 1} {
		t.Run(name, func(t *testing.T) {
			sum := strings.Repeat("s", limit-fixed+over)
			e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
				h := w.Header()
				h["Date"] = nil // not sent: the record holds Content-Type alone
				h.Set("Content-Type", "text/plain")
				h.Set("Trailer", "X-Sum")
				w.WriteHeader(http.StatusCreated)
				w.Write([]byte("ok"))
				h.Set("X-Sum", sum)
			}, withPolicy(func(p *Policy) { p.MaxResponseBody = limit }))
			if first := e.do(t, "POST", "/x", "k", "{}"); first.body != "ok" || first.Trailer.Get("X-Sum") != sum {
				t.Fatalf("first: %d %q with trailers %d bytes, want the whole answer", first.StatusCode, first.body, len(first.Trailer.Get("X-Sum")))
			}
			r := e.do(t, "POST", "/x", "k", "{}")
			if !r.replayed() || r.StatusCode != http.StatusCreated || e.up.calls.Load() != 1 {
				t.Fatalf("retry: %d replayed=%v after %d executions, want the recorded 201", r.StatusCode, r.replayed(), e.up.calls.Load())
			}
			whole := over == 0
			omitted := r.Header.Get("Idempotent-Body-Omitted") == "true"
			kept := r.body == "ok" && r.Trailer.Get("X-Sum") == sum
			if kept != whole || omitted == whole || !whole && (r.body != "" || r.Trailer.Get("X-Sum") != "") {
				t.Errorf("%d bytes, limit %d: replayed %q with a %d-byte trailer, omitted %v; want the whole answer %v",
					limit+over, limit, r.body, len(r.Trailer.Get("X-Sum")), omitted, whole)
			}
		})
	}
}

// An answer that declares a length of 0 and still carries trailers (an
// HTTP/2 upstream can send one) is replayed as it came: with its
// Content-Length of 0, and its trailers.
func TestEmptyAnswerWithTrailersIsReplayedWithItsDeclaredLength(t *testing.T) {
	envOverH2C = true // the client reads the trailers beside a length only over HTTP/2
	t.Cleanup(func() { envOverH2C = false })
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "0")
		w.Header().Set("Trailer", "X-Sum")
		w.WriteHeader(http.StatusCreated)
		w.Header().Set("X-Sum", "s1")
	}))
	up.Config.Protocols = new(http.Protocols)
	up.Config.Protocols.SetUnencryptedHTTP2(true)
	up.Start()
	t.Cleanup(up.Close)
	u, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, nil, func(o *Options) { o.Upstream, o.UpstreamProtocol = u, UpstreamH2C })
	first := e.do(t, "POST", "/x", "k", "{}")
	replay := e.do(t, "POST", "/x", "k", "{}")
	if !replay.replayed() || replay.StatusCode != http.StatusCreated {
		t.Fatalf("retry: %d replayed=%v, want the recorded 201", replay.StatusCode, replay.replayed())
	}
	for name, r := range map[string]*response{"first": first, "replay": replay} {
		if r.ContentLength != 0 || r.Header.Get("Content-Length") != "0" || r.Trailer.Get("X-Sum") != "s1" {
			t.Errorf("%s: Content-Length %d (%q), trailer X-Sum %q; want the declared 0 and s1", name, r.ContentLength, r.Header.Get("Content-Length"), r.Trailer.Get("X-Sum"))
		}
	}
}

// An answer whose body is over max_response_body is recorded without it,
// its trailers kept when they fit: a retry gets them after the empty body
// over HTTP/1.1 as over HTTP/2, not a length that leaves no room for them,
// from the memory store, the file store and a redis-server alike.
func TestAnswerRecordedWithoutItsBodyKeepsItsTrailers(t *testing.T) {
	srv := redistest.Start(t)
	stores := map[string]func(t *testing.T) Store{
		"memory": func(t *testing.T) Store {
			st := memory.New(memory.Options{})
			t.Cleanup(func() { st.Close() })
			return st
		},
		"file": func(t *testing.T) Store {
			st, err := filestore.Open(filestore.Options{Path: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
		"redis-server": func(t *testing.T) Store {
			st, err := redisstore.New(redisstore.Options{URL: srv.URL()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
	}
	for name, newStore := range stores {
		for _, h2 := range []bool{false, true} {
			proto := map[bool]string{false: "HTTP/1.1", true: "HTTP/2"}[h2]
			t.Run(name+"/"+proto, func(t *testing.T) {
				envOverH2C = h2
				t.Cleanup(func() { envOverH2C = false })
				e := newEnv(t, func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Trailer", "X-Checksum")
					w.Write([]byte(strings.Repeat("x", 4096)))
					w.Header().Set("X-Checksum", "c1")
				}, withStore(newStore(t)), withPolicy(func(p *Policy) { p.MaxResponseBody = 1024 }))
				key := name + "/" + proto // one redis-server for every subtest
				first := e.do(t, "POST", "/x", key, "{}")
				if len(first.body) != 4096 || first.Trailer.Get("X-Checksum") != "c1" {
					t.Fatalf("first: %d bytes, trailers %v; want the whole body and X-Checksum", len(first.body), first.Trailer)
				}
				replay := e.do(t, "POST", "/x", key, "{}")
				if !replay.replayed() || replay.Header.Get("Idempotent-Body-Omitted") != "true" || replay.body != "" {
					t.Fatalf("replay: replayed=%v omitted=%q %d bytes; want a replay without its body", replay.replayed(), replay.Header.Get("Idempotent-Body-Omitted"), len(replay.body))
				}
				if got := replay.Trailer.Get("X-Checksum"); got != "c1" {
					t.Errorf("replay's trailers %v, want the recorded X-Checksum", replay.Trailer)
				}
			})
		}
	}
}
