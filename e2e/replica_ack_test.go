package e2e

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/wait"
)

const mReplicaAckFailures = "idempotency_proxy_store_replica_ack_failures_total"

// TestUnreplicatedLeaseIsNotForwarded: with replica_ack: 1 a lease no
// replica acknowledged is never forwarded on. With the replica paused,
// fail_closed answers 503 store-unavailable without calling the upstream
// and fail_open forwards, counted; the lease is released, so the retry
// once the replica is back executes (once). docs/redis.md, "Waiting for
// replicas".
func TestUnreplicatedLeaseIsNotForwarded(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	up := startUpstream(t)
	cfg := withOpenRoute(baseConfig(up, master.URL()))
	// A replica that is up acknowledges within a second even on a loaded
	// machine; the default 50 ms is an operator's setting for a quiet
	// network, and a WAIT that times out here would fail the requests made
	// with the replica up.
	cfg.ReplicaAck, cfg.ReplicaAckTimeout, cfg.RedisTimeout = 1, time.Second, 2*time.Second
	p := startProxy(t, "ack", cfg)
	c := newClient(t, 5*time.Second)

	if r := mustSend(t, c, p.URL(), request{Key: "replicated"}); r.Status != http.StatusCreated {
		t.Fatalf("with the replica up: %s, want 201", r)
	}
	if got := metricSum(t, mReplicaAckFailures, nil, p); got != 0 {
		t.Fatalf("%s = %v with the replica up, want 0", mReplicaAckFailures, got)
	}

	replica.Pause()
	t.Cleanup(replica.Resume)
	r := mustSend(t, c, p.URL(), request{Key: "unreplicated"})
	if r.Status != http.StatusServiceUnavailable || r.Problem() != "store-unavailable" {
		t.Errorf("fail_closed with the replica paused: %s, want 503 store-unavailable", r)
	}
	if n := up.Count("unreplicated"); n != 0 {
		t.Errorf("upstream executed the unreplicated key %d times, want 0", n)
	}
	bypassed := metricSum(t, mRequests, outcome("store_unavailable_bypassed"), p)
	if r := mustSend(t, c, p.URL(), request{Path: openRoute + "x", Key: "open"}); r.Status != http.StatusCreated {
		t.Errorf("fail_open with the replica paused: %s, want 201 (forwarded)", r)
	}
	if got := metricSum(t, mRequests, outcome("store_unavailable_bypassed"), p) - bypassed; got != 1 {
		t.Errorf("store_unavailable_bypassed grew by %v, want 1", got)
	}
	if got := metricSum(t, mReplicaAckFailures, map[string]string{"operation": "begin"}, p); got != 2 {
		t.Errorf("%s{operation=begin} = %v, want 2", mReplicaAckFailures, got)
	}

	replica.Resume()
	if r := mustSend(t, c, p.URL(), request{Key: "unreplicated"}); r.Status != http.StatusCreated || up.Count("unreplicated") != 1 {
		t.Errorf("retry with the replica back: %s, %d executions; want 201 and 1 (the lease was released)", r, up.Count("unreplicated"))
	}
}

// TestUnacknowledgedRecordIsReplayedAndSaidToBeOnTheMaster: with
// replica_ack: 1 and the replica paused after the lease was acknowledged,
// the record is written on the master but no replica acknowledges it. When
// its lease runs out the proxy says so — written on the master, not on a
// replica, a failover before the replica has it would execute the key
// again — and not that a retry will execute again: the retry, the replica
// still paused, is the recorded answer, and once the replica is back it
// holds the record. docs/redis.md, "Waiting for replicas".
func TestUnacknowledgedRecordIsReplayedAndSaidToBeOnTheMaster(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	up := startUpstream(t)
	cfg := baseConfig(up, master.URL()) // lock_ttl 2s
	cfg.ReplicaAck, cfg.ReplicaAckTimeout, cfg.RedisTimeout = 1, time.Second, 2*time.Second
	p := startProxy(t, "ack", cfg)
	c := newClient(t, 10*time.Second)
	// A first key loads the store's scripts: the completion below is one
	// script call and one WAIT, not a NOSCRIPT and a second WAIT.
	if r := mustSend(t, c, p.URL(), request{Key: "warm"}); r.Status != http.StatusCreated {
		t.Fatalf("with the replica up: %s, want 201", r)
	}

	first := make(chan reply, 1)
	go func() {
		first <- send(context.Background(), c, p.URL(), request{Key: "unacknowledged", Header: map[string]string{hdrHold: "1"}})
	}()
	up.WaitCount("unacknowledged", 1, 10*time.Second) // its lease is on the replica
	replica.Pause()
	t.Cleanup(replica.Resume)
	up.Unhold()
	r := <-first
	if r.Err != nil || r.Status != http.StatusCreated {
		t.Fatalf("the held request: %s, want 201", r)
	}

	// The completion is retried until the lease runs out, each try saying
	// the record is on the master; then one line says how it ended.
	const (
		written = "response recorded on the store's master, but fewer replicas than replica_ack acknowledged it before its lease expired"
		lost    = "could not record response before its lease expired"
	)
	ended := func() []map[string]any {
		var out []map[string]any
		for _, line := range p.logLines(map[string]string{"level": "WARN"}) {
			if msg, _ := line["msg"].(string); strings.HasPrefix(msg, written) || strings.HasPrefix(msg, lost) {
				out = append(out, line)
			}
		}
		return out
	}
	wait.SucceedsSoon(t, 20*time.Second, func() error {
		if len(ended()) == 0 {
			return errors.New("no line yet on how recording the response ended")
		}
		return nil
	})
	if lines := ended(); len(lines) != 1 || !strings.HasPrefix(lines[0]["msg"].(string), written) {
		t.Errorf("how recording ended: %v, want one line %q…", lines, written)
	}
	tries := p.logLines(map[string]string{"level": "WARN", "msg": "response recorded on the store's master, not yet acknowledged by replica_ack replicas; writing it again until they do or its lease expires"})
	if len(tries) == 0 || len(p.logLines(map[string]string{"msg": "could not record response yet; retrying until its lease expires"})) != 0 {
		t.Errorf("%d tries said the record is on the master, want every one of them", len(tries))
	}
	if got := metricSum(t, mReplicaAckFailures, map[string]string{"operation": "complete"}, p); got < 1 {
		t.Errorf("%s{operation=complete} = %v, want the shortfalls counted", mReplicaAckFailures, got)
	}

	if r := mustSend(t, c, p.URL(), request{Key: "unacknowledged"}); !r.Replayed() || up.Count("unacknowledged") != 1 {
		t.Errorf("retry with the replica still paused: %s, %d executions; want the replay", r, up.Count("unacknowledged"))
	}
	replica.Resume()
	wait.SucceedsSoon(t, 10*time.Second, func() error {
		if n := replica.CountKeys(t, "idem:{*}"); n != 2 {
			return errors.New("the replica does not hold the record yet")
		}
		return nil
	})
}
