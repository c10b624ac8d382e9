package redisstore

import (
	"context"
	"errors"
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

	b, err := plain.Begin(ctx, "record", store.Lease{}, time.Minute)
	if err != nil {
		t.Fatalf("Begin without replica_ack: %v", err)
	}
	err = acked.Complete(ctx, "record", b.Token, &store.Record{Status: 201}, time.Hour)
	if !errors.Is(err, store.ErrUnreplicated) || !strings.Contains(errString(err), "NOPERM") {
		t.Errorf("Complete whose WAIT is refused: %v; want ErrUnreplicated naming the refusal (NOPERM)", err)
	}
	if v, err := admin.Get(ctx, acked.redisKey("record")).Bytes(); err != nil || v[0] != kindRecord {
		t.Errorf("value after the refused WAIT = %q, %v; want the record, written", v, err)
	}
	if begin, complete := acked.ReplicaAckFailures(); begin != 1 || complete != 1 {
		t.Errorf("ReplicaAckFailures = %d, %d; want 1, 1", begin, complete)
	}
}
