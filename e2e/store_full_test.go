package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

// Metric names documented in docs/operating.md#metrics for a full or
// evicting store.
const (
	mBodyOmitted    = "idempotency_proxy_records_body_omitted_total"
	mStoreFull      = "idempotency_proxy_store_full"
	mEvictionUnsafe = "idempotency_proxy_store_eviction_unsafe"
)

// The start of log messages the tests await (docs/redis.md).
const (
	logHeldFull  = "store full: no room to record a response"
	logRoomAgain = "store had room again: response recorded"
	logMayEvict  = "the store may evict the proxy's keys"
)

// fullLockTTL is the lease of the full-store tests: short, so that a test
// can outlast it a few times.
const fullLockTTL = time.Second

// fullEnv is a noeviction Redis with room for a few MiB, an upstream, and
// two proxy replicas using it.
type fullEnv struct {
	rdb *redis.Client
	up  *upstream
	ps  []*proxyProc
	c   *http.Client
}

func startFullEnv(t *testing.T) fullEnv {
	t.Helper()
	srv := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	up := startUpstream(t)
	cfg := withPolicy(baseConfig(up, srv.URL()), "lock_ttl", fullLockTTL.String())
	cfg = withPolicy(cfg, "max_response_body", "4MiB") // a large body is recorded, when it fits
	return fullEnv{rdb: srv.Client(t), up: up, ps: startReplicas(t, 2, cfg), c: newClient(t, 10*time.Second)}
}

// runWhileFilling sends rq to the first replica with the upstream holding
// it, runs fill once the upstream has it — the key was taken while Redis
// had room, only its record may find none —, lets the upstream answer, and
// returns the client's reply and the execution.
func (e fullEnv) runWhileFilling(t *testing.T, rq request, fill func()) (reply, execution) {
	t.Helper()
	done := make(chan reply, 1)
	go func() {
		held := rq
		held.Header = map[string]string{hdrHold: "1"}
		for k, v := range rq.Header {
			held.Header[k] = v
		}
		done <- send(context.Background(), e.c, e.ps[0].URL(), held)
	}()
	e.up.WaitCount(rq.Key, 1, 5*time.Second)
	fill()
	e.up.Unhold()
	first := <-done
	ex := e.up.onlyExecution(t, rq.Key)
	if first.Err != nil || first.Status != http.StatusCreated || first.Body != ex.Body {
		t.Fatalf("first request: %s (%d bytes), want the upstream's 201 with its %d bytes", first, len(first.Body), len(ex.Body))
	}
	return first, ex
}

// TestFullRedisNeverExecutesTwice fills a real Redis under noeviction past
// maxmemory while a request runs upstream (docs/redis.md "When Redis is
// full"): the client gets the upstream's response; the key stays locked
// past lock_ttl on every replica (its lease renewed while Redis refuses
// writes); a new key gets 503 store-full without reaching the upstream;
// /readyz and the store_full gauge name the full store. Once the filler is
// deleted the record is written and the retry is a replay: one execution.
func TestFullRedisNeverExecutesTwice(t *testing.T) {
	e := startFullEnv(t)
	rq := request{Key: "full-redis", Body: `{"amount":100}`}
	var filler []string
	_, ex := e.runWhileFilling(t, rq, func() {
		filler = append(fillRedis(t, e.rdb), pushPastMaxmemory(t, e.rdb)...)
	})

	t.Run("retries while full", func(t *testing.T) {
		// Past three lock_ttls an unrenewed lease would long have expired
		// and a retry executed again.
		i := 0
		if err := wait.Throughout(3*fullLockTTL, func() error {
			r := mustSend(t, e.c, e.ps[i%len(e.ps)].URL(), rq)
			if r.Status != http.StatusConflict || r.Problem() != "in-flight" {
				return fmt.Errorf("retry %d while full: %s %q, want 409 in-flight (the key held)", i, r, r.Body)
			}
			i++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		e.up.onlyExecution(t, rq.Key)
		// The 409s are the owner holding the key, and it says so.
		waitLogLine(t, e.ps[0], "ERROR", logHeldFull)
	})

	t.Run("new key refused", func(t *testing.T) {
		const fresh = "full-redis-new"
		r := mustSend(t, e.c, e.ps[1].URL(), request{Key: fresh})
		if r.Problem() != "store-full" || r.Header.Get("Retry-After") != "5" {
			t.Errorf("new key while full: %s (Retry-After %q), want 503 store-full with Retry-After: 5", r, r.Header.Get("Retry-After"))
		}
		if n := e.up.Count(fresh); n != 0 {
			t.Errorf("new key refused as store-full but executed %d times upstream", n)
		}
	})

	t.Run("readyz names it", func(t *testing.T) { checkNamedFull(t, e.ps) })

	if err := e.rdb.Del(context.Background(), filler...).Err(); err != nil {
		t.Fatalf("free memory: delete %d filler keys: %v", len(filler), err)
	}
	again := retryUntilSettled(t, e, rq)
	// The record that waited for room is the one without the body
	// (docs/guarantees.md "A full store never causes a second execution").
	checkReplayWithoutBody(t, again, ex)
	waitLogLine(t, e.ps[0], "INFO", logRoomAgain)
	if got := metricSum(t, mBodyOmitted, map[string]string{"reason": "store_full"}, e.ps...); got != 1 {
		t.Errorf("%s{reason=store_full} = %v, want 1", mBodyOmitted, got)
	}
	if got := metricSum(t, mLockLost, nil, e.ps...); got != 0 {
		t.Errorf("%s = %v, want 0: the held lease was never lost", mLockLost, got)
	}
	e.up.onlyExecution(t, rq.Key)
}

// TestFullRedisKeepsTheRecordWithoutItsBody fills a real Redis until it
// refuses a large write but still takes a small one, the way Redis fills
// up in service: a 1 MiB response is delivered in full, and recorded
// without its body. The retry is a replay marked Idempotent-Body-Omitted,
// counted in records_body_omitted_total{reason="store_full"}, while Redis
// still has no room for the body.
//
// The key may answer 409 for a second or two first: Redis keeps a query
// buffer the size of the refused 1 MiB command on that connection until
// its next pass over idle clients, and counts it as used memory, so the
// record without its body can be refused at first and written on a later
// try. Either way the upstream runs once.
func TestFullRedisKeepsTheRecordWithoutItsBody(t *testing.T) {
	e := startFullEnv(t)
	const large = 1 << 20
	rq := request{Key: "full-redis-large", Header: map[string]string{hdrPad: strconv.Itoa(large)}}
	_, ex := e.runWhileFilling(t, rq, func() {
		filler := fillRedis(t, e.rdb)
		// Room for a small write, far from room for the 1 MiB record.
		if err := e.rdb.Del(context.Background(), filler[len(filler)-1]).Err(); err != nil {
			t.Fatalf("delete a filler key: %v", err)
		}
	})
	checkNamedFull(t, e.ps[:1]) // the refused write is recent

	again := retryUntilSettled(t, e, request{Key: rq.Key})
	checkReplayWithoutBody(t, again, ex)
	if got := metricSum(t, mBodyOmitted, map[string]string{"reason": "store_full"}, e.ps...); got != 1 {
		t.Errorf("%s{reason=store_full} = %v, want 1", mBodyOmitted, got)
	}
	if err := e.rdb.Set(context.Background(), fillerPrefix+"large", strings.Repeat("f", large), 0).Err(); !isOOM(err) {
		t.Errorf("a 1 MiB write after the record: error %v, want OOM (the body never had room)", err)
	}
	e.up.onlyExecution(t, rq.Key)
}

// retryUntilSettled sends rq, alternating replicas, until it gets anything
// but 409: the owner settles the key on its next try, until then the key
// is in flight.
func retryUntilSettled(t *testing.T, e fullEnv, rq request) reply {
	t.Helper()
	var r reply
	i := 0
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		r = mustSend(t, e.c, e.ps[i%len(e.ps)].URL(), rq)
		i++
		if r.Status == http.StatusConflict {
			return fmt.Errorf("key %s still in flight (409) after %d retries: the record was never written", rq.Key, i)
		}
		return nil
	})
	return r
}

// checkReplayWithoutBody asserts that r replays ex's status and headers
// without its body.
func checkReplayWithoutBody(t *testing.T, r reply, ex execution) {
	t.Helper()
	if !r.Replayed() || r.Status != http.StatusCreated || r.Header.Get("X-Exec") != strconv.Itoa(ex.Seq) {
		t.Fatalf("retry: %s (X-Exec %q), want the replay of execution %d", r, r.Header.Get("X-Exec"), ex.Seq)
	}
	if r.Header.Get("Idempotent-Body-Omitted") != "true" || r.Body != "" || r.Header.Get("Content-Length") != "0" {
		t.Errorf("replay: Idempotent-Body-Omitted %q, Content-Length %q, %d body bytes; want the status and headers without the body",
			r.Header.Get("Idempotent-Body-Omitted"), r.Header.Get("Content-Length"), len(r.Body))
	}
}

// checkNamedFull asserts that each proxy's /readyz stays 200 but names the
// full store, and that the store_full gauge is 1.
func checkNamedFull(t *testing.T, ps []*proxyProc) {
	t.Helper()
	for _, p := range ps {
		code, body := getReadyz(t, p)
		if code != http.StatusOK || !strings.Contains(body, "store full") {
			t.Errorf("%s /readyz while full = %d %q, want 200 naming the full store", p.name, code, body)
		}
		// The gauge follows the check /readyz just ran.
		if got := metricSum(t, mStoreFull, nil, p); got != 1 {
			t.Errorf("%s %s = %v while full, want 1", p.name, mStoreFull, got)
		}
	}
}
