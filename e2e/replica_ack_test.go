package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/redistest"
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
