package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
)

// TestReplicasExactlyOnce fires hundreds of concurrent requests over a few
// dozen keys at two and three proxy replicas sharing one Redis: each key
// must run upstream exactly once, and every client must end with the
// recorded response of that one execution.
func TestReplicasExactlyOnce(t *testing.T) {
	for _, replicas := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d replicas", replicas), func(t *testing.T) {
			srv := redistest.Start(t)
			up := startUpstream(t)
			ps := startReplicas(t, replicas, baseConfig(up, srv.URL()))
			const keys, perKey = 30, 10
			results, conflicts := fire(t, ps, "order", keys, perKey, map[string]string{hdrSleep: "150ms"})
			checkExactlyOnce(t, up, results)
			// Duplicates arrive while the first request runs: they must
			// have been told to come back (409 in-flight, Retry-After: 1,
			// checked by fire), not queued or executed.
			if conflicts == 0 {
				t.Errorf("no client saw a 409 although %d requests per key arrived at once", perKey)
			}
		})
	}
}

// fireConcurrently sends perKey requests for each of keys keys (named
// prefix-NNN), all at
// once, spread over the replicas; each client retries until it gets a
// final answer. It returns every client's final reply, by key.
func fireConcurrently(t *testing.T, ps []*proxyProc, prefix string, keys, perKey int, hdr map[string]string) map[string][]reply {
	t.Helper()
	results, _ := fire(t, ps, prefix, keys, perKey, hdr)
	return results
}

// fire is fireConcurrently that also counts the 409s clients got on the
// way, each checked to be the in-flight problem with Retry-After: 1.
func fire(t *testing.T, ps []*proxyProc, prefix string, keys, perKey int, hdr map[string]string) (results map[string][]reply, conflicts int) {
	t.Helper()
	c := newClient(t, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := make(chan struct{})
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	results = map[string][]reply{}
	for k := range keys {
		key := fmt.Sprintf("%s-%03d", prefix, k)
		for i := range perKey {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rt := retrier{Client: c, Bases: rotate(bases(ps), k+i), MaxAttempts: 100,
					MaxWait: 100 * time.Millisecond, Rand: testRand(uint64(k*perKey + i))}
				<-start
				got := rt.Do(ctx, request{Key: key, Body: `{"item":"` + key + `"}`, Header: hdr})
				mu.Lock()
				defer mu.Unlock()
				results[key] = append(results[key], got[len(got)-1])
				for _, r := range got[:len(got)-1] {
					if r.Err != nil || r.Status != http.StatusConflict {
						continue
					}
					conflicts++
					if r.Problem() != "in-flight" || r.Header.Get("Retry-After") != "1" {
						t.Errorf("key %s: duplicate in flight got %s (Retry-After %q), want 409 in-flight with Retry-After: 1",
							key, r, r.Header.Get("Retry-After"))
					}
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	return results, conflicts
}

// checkExactlyOnce asserts one execution per key, one executed (not
// replayed) reply per key, and every reply equal to that execution's body.
func checkExactlyOnce(t *testing.T, up *upstream, results map[string][]reply) {
	t.Helper()
	for key, replies := range results {
		ex := up.Execs(key)
		if len(ex) != 1 {
			t.Errorf("key %s: %d upstream executions, want 1", key, len(ex))
			continue
		}
		fresh := 0
		for _, r := range replies {
			if r.Err != nil || r.Status != http.StatusCreated {
				t.Errorf("key %s: final reply %s, want 201", key, r)
				continue
			}
			if r.Body != ex[0].Body {
				t.Errorf("key %s: body %q, want the recorded %q", key, r.Body, ex[0].Body)
			}
			if r.Replayed() {
				if got := r.Header.Get("Set-Cookie"); got != "" {
					t.Errorf("key %s: replay carries Set-Cookie %q, want none", key, got)
				}
			} else {
				fresh++
			}
		}
		if fresh != 1 {
			t.Errorf("key %s: %d replies not marked Idempotent-Replayed, want 1", key, fresh)
		}
	}
}

// rotate returns s shifted left by n, so clients start on different replicas.
func rotate(s []string, n int) []string {
	n %= len(s)
	return append(append([]string(nil), s[n:]...), s[:n]...)
}
