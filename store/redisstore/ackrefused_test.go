package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/testkit/redistest"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// TestRefusedReplicaWaitIsAShortfall checks that a WAIT Redis refuses (here
// by an ACL that denies it), while the write before it succeeds, is a
// shortfall like a WAIT that counted too few replicas: the lease is given
// back and Begin fails with ErrUnavailable; the record stays written and
// Complete fails with ErrUnreplicated; each names the refusal and counts
// in ReplicaAckFailures.
func TestRefusedReplicaWaitIsAShortfall(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	if err := admin.Do(ctx, "acl", "setuser", "nowait", "on", ">pw", "~*", "&*", "+@all", "-wait").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	url := "redis://nowait:pw@" + srv.Addr() + "/0"
	plain := newStore(t, Options{URL: url})
	acked := newStore(t, Options{URL: url, ReplicaAck: 1})

	_, err := acked.Begin(ctx, "lease", store.Lease{}, time.Minute)
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(errString(err), "NOPERM") {
		t.Errorf("Begin whose WAIT is refused: %v; want ErrUnavailable naming the refusal (NOPERM)", err)
	}
	if n := admin.Exists(ctx, acked.redisKey("lease")).Val(); n != 0 {
		t.Error("the lease whose WAIT was refused is still held")
	}

	// A record of a few bytes goes in a batch, one larger than
	// maxPipelined on a connection of its own, each followed by its WAIT.
	for _, body := range [][]byte{[]byte("ok"), make([]byte, maxPipelined+1)} {
		key := "record of " + strconv.Itoa(len(body)) + " bytes"
		b, err := plain.Begin(ctx, key, store.Lease{}, time.Minute)
		if err != nil {
			t.Fatalf("Begin without replica_ack: %v", err)
		}
		err = acked.Complete(ctx, key, b.Token, &store.Record{Status: 201, Body: body}, time.Hour)
		if !errors.Is(err, store.ErrUnreplicated) || !strings.Contains(errString(err), "NOPERM") {
			t.Errorf("Complete of a %s whose WAIT is refused: %v; want ErrUnreplicated naming the refusal (NOPERM)", key, err)
		}
		if v, err := admin.Get(ctx, acked.redisKey(key)).Bytes(); err != nil || v[0] != kindRecord {
			t.Errorf("value of the %s after the refused WAIT = %.20q, %v; want the record, written", key, v, err)
		}
	}
	if begin, complete := acked.ReplicaAckFailures(); begin != 1 || complete != 2 {
		t.Errorf("ReplicaAckFailures = %d, %d; want 1, 2", begin, complete)
	}
	// The memory-loss markers' advance, unacknowledged, is not remembered
	// (epoch.go), and is no failure.
	if _, err := acked.Health(ctx); err != nil {
		t.Errorf("Health with WAIT refused: %v", err)
	}
}
