package redisstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Redis replicates asynchronously: a lease or record a master acknowledged
// is lost with it if it fails before a replica has it, and the promoted
// replica then lets the key execute again. With Options.ReplicaAck = N the
// lease's SET and the completion's script are followed by WAIT N timeout on
// the connection that wrote them, to the key's master (WAIT counts the
// replicas holding every write of its connection). They go through the
// batcher: one WAIT at the end of a batch covers every write of the batch
// (batch.go), a WAIT per master in a Cluster. A completion too large to be
// batched goes directly, pipelined with a WAIT of its own (doAcked).
//
// A lease fewer than N replicas hold is released and Begin fails with
// ErrUnavailable, so the route's on_store_error decides. A record fewer
// than N hold stays written, and Complete fails with ErrUnavailable: the
// caller retries, and the completion script writes the same record again
// (completeScript), so the retry's WAIT covers it on whichever node is
// master by then. Both count in acks.failures. A WAIT that fell short
// fails every acknowledged command of its batch alike.
type acks struct {
	n       int           // replicas to wait for; 0: off
	timeout time.Duration // per WAIT

	failures [2]atomic.Uint64 // by ackBegin, ackComplete
}

const (
	ackBegin = iota
	ackComplete
)

// ReplicaAckFailures reports how many leases (begin) and records
// (complete) fewer than ReplicaAck replicas acknowledged in time.
func (s *Store) ReplicaAckFailures() (begin, complete uint64) {
	return s.acks.failures[ackBegin].Load(), s.acks.failures[ackComplete].Load()
}

// shortfall counts a failed wait for op and returns the error its caller
// reports: the WAIT's own error, or how many replicas acknowledged. A
// record's shortfall is store.ErrUnreplicated: the record is written on
// the master, only the replicas' copies are in doubt (a lease's shortfall
// is released, so it stays ErrUnavailable).
func (s *Store) shortfall(op int, what string, got int64, err error) error {
	s.acks.failures[op].Add(1)
	name := [...]string{ackBegin: "begin", ackComplete: "complete"}[op]
	var cause error = store.ErrUnavailable
	if op == ackComplete {
		cause = store.ErrUnreplicated
	}
	if err != nil {
		return fmt.Errorf("redis %s: %w: waiting for %d replicas to acknowledge the %s: %w",
			name, cause, s.acks.n, what, err)
	}
	return fmt.Errorf("redis %s: %w: %d of %d replicas acknowledged the %s within %v",
		name, cause, got, s.acks.n, what, s.acks.timeout)
}

// doAcked runs cmd, then WAIT, as one pipeline on one connection to the
// master of rkey, by the deadline dl. It returns cmd's error (as do does;
// redis.Nil is a reply) and the replicas WAIT counted, or WAIT's error.
func (s *Store) doAcked(ctx context.Context, dl time.Time, rkey string, cmd redis.Cmder) (acked int64, waitErr, err error) {
	ctx, cancel := context.WithDeadline(ctx, dl)
	defer cancel()
	var p redis.Pipeliner
	if cc, ok := s.c.(*redis.ClusterClient); ok {
		// A Cluster pipeline sends a keyless WAIT to any node: send both
		// to the key's master instead.
		node, err := cc.MasterForKey(ctx, rkey)
		if err != nil {
			cmd.SetErr(err)
			return 0, nil, err
		}
		p = node.Pipeline()
	} else {
		p = s.c.Pipeline()
	}
	wait := redis.NewIntCmd(ctx, "wait", s.acks.n, millis(s.acks.timeout))
	_ = p.Process(ctx, cmd)
	_ = p.Process(ctx, wait)
	if _, perr := p.Exec(ctx); perr != nil && cmd.Err() != perr && wait.Err() != perr {
		// The pipeline never ran (no connection could be made ready).
		cmd.SetErr(perr)
		return 0, nil, perr
	}
	n, werr := wait.Result()
	return n, werr, cmd.Err()
}
