package redisstore

import (
	"context"
	"fmt"
	"sync"
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
// In a Cluster, a cmd answered MOVED or ASK is sent again, once, where
// that answer says (batcher.followRedirects).
func (s *Store) doAcked(ctx context.Context, dl time.Time, rkey string, cmd redis.Cmder) (acked int64, waitErr, err error) {
	ctx, cancel := context.WithDeadline(ctx, dl)
	defer cancel()
	cc, cluster := s.c.(*redis.ClusterClient)
	var c redis.Cmdable = s.c
	if cluster {
		// A Cluster pipeline sends a keyless WAIT to any node: send both
		// to the key's master instead.
		node, err := cc.MasterForKey(ctx, rkey)
		if err != nil {
			cmd.SetErr(err)
			return 0, nil, err
		}
		c = node
	}
	wait := redis.NewIntCmd(ctx, "wait", s.acks.n, millis(s.acks.timeout))
	pipeline(ctx, c, []redis.Cmder{cmd}, wait)
	if addr, ask, moved := redirectOf(cmd.Err()); cluster && moved {
		node, err := masterAt(ctx, cc, addr)
		if err != nil {
			cmd.SetErr(err)
			return 0, nil, err
		}
		wait = redis.NewIntCmd(ctx, "wait", s.acks.n, millis(s.acks.timeout))
		pipeline(ctx, node, redirected(ctx, []redis.Cmder{cmd}, ask), wait)
	}
	n, werr := wait.Result()
	return n, werr, cmd.Err()
}

// redirectOf reads a Cluster's MOVED or ASK answer: the address it names,
// and whether it was ASK.
func redirectOf(err error) (addr string, ask, ok bool) {
	if addr, ok := redis.IsMovedError(err); ok {
		return addr, false, true
	}
	addr, ok = redis.IsAskError(err)
	return addr, true, ok
}

// redirected readies cmds, answered MOVED or ASK, to be sent again: their
// error cleared, and each after an ASKING when ask (ASKING lets the next
// command reach a slot its master is still importing).
func redirected(ctx context.Context, cmds []redis.Cmder, ask bool) []redis.Cmder {
	out := make([]redis.Cmder, 0, 2*len(cmds))
	for _, cmd := range cmds {
		cmd.SetErr(nil)
		if ask {
			out = append(out, redis.NewStatusCmd(ctx, "asking"))
		}
		out = append(out, cmd)
	}
	return out
}

// masterAt is the Cluster's master at addr, found in its slot map loaded
// anew (ForEachMaster reloads it): a MOVED answer means the client's map
// is out of date, and the commands sent after this one find the new
// master too.
func masterAt(ctx context.Context, cc *redis.ClusterClient, addr string) (*redis.Client, error) {
	var mu sync.Mutex
	var found *redis.Client
	err := cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		if c.Options().Addr == addr {
			mu.Lock()
			found = c
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if found == nil {
		return nil, fmt.Errorf("no master at %s, which the Cluster redirected to", addr)
	}
	return found, nil
}
