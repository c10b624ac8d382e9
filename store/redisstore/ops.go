package redisstore

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Value kinds, the first byte of every value.
const (
	kindLease  = 'L'
	kindRecord = 'R'
	// leaseHeader is the kind byte plus the fingerprint; the token follows,
	// then the lease's description (store.AppendLease), which a lease
	// written before leases were described does not have.
	leaseHeader = 1 + len(store.Fingerprint{})
	tokenLen    = 32
	// leaseFixed is the part of a lease value every version has.
	leaseFixed = leaseHeader + tokenLen
)

// The scripts check that the key holds a lease whose token is ARGV[1]. They
// are built from the constants above, which fix where the kind byte and the
// token sit in a value (Lua indexes from 1, and string.sub's end is
// inclusive). The token's place is the same in a lease of either version,
// with or without a description after it.
var (
	leaseCheck = fmt.Sprintf(
		"local v = redis.call('GET', KEYS[1])\n"+
			"local owned = v and string.byte(v, 1) == %d and string.sub(v, %d, %d) == ARGV[1]\n",
		kindLease, leaseHeader+1, leaseFixed)

	completeScript = newScript(leaseCheck + `if owned then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
-- A retry whose first attempt stored this very record succeeded. It writes
-- the record again (same value, same expiry): a wait for replicas after it
-- then covers the record on whichever node is master now.
if v == ARGV[2] then
  redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
  return 1
end
return 0`)

	// extendScript may run while Redis is out of memory (Redis 7+): it only
	// reads and sets an expiry, which allocates nothing. See extend.
	extendBody = leaseCheck + `if owned then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`
	extendScript       = newScript("#!lua flags=allow-oom\n" + extendBody)
	extendScriptLegacy = newScript(extendBody)

	releaseScript = newScript(leaseCheck + `if owned then
  return redis.call('DEL', KEYS[1])
end
return 0`)
)

// Begin takes a lease on key, described by l, with one SET NX PX GET, or
// reports the lease or record already there. While tombstones are looked
// for (CheckTombstones), it is one script instead that also reports a
// tombstone there, as Expired, without taking the lease.
func (s *Store) Begin(ctx context.Context, key string, l store.Lease, lease time.Duration) (store.BeginResult, error) {
	dl := time.Now().Add(s.timeout)
	fp := l.Fingerprint
	val := make([]byte, leaseFixed, leaseFixed+store.EncodedLeaseSize(&l))
	val[0] = kindLease
	copy(val[1:], fp[:])
	var raw [tokenLen / 2]byte
	_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails (Go 1.24+)
	hex.Encode(val[leaseHeader:], raw[:])
	token := string(val[leaseHeader:leaseFixed])
	val = store.AppendLease(val, &l)

	rkey := s.redisKey(key)
	var acked int64
	var waitErr, err error
	send := func(cmd redis.Cmder) error {
		if s.acks.n > 0 {
			var err error
			acked, waitErr, err = s.batch.doAcked(ctx, dl, rkey, cmd)
			return err
		}
		return s.do(ctx, dl, cmd, false)
	}
	var tombs *redis.Cmd
	var cmd *redis.StringCmd
	if s.tombs.Load() {
		tombs, err = s.beginTombs(ctx, dl, key, rkey, val, lease, token, send)
	} else {
		cmd = redis.NewStringCmd(ctx, "set", rkey, val, "px", millis(lease), "nx", "get")
		err = send(cmd)
	}
	switch {
	case errors.Is(err, redis.Nil):
		if s.acks.n > 0 && (waitErr != nil || acked < int64(s.acks.n)) {
			// The lease could be lost in a failover: give it back, so
			// that the key is free for the retry on_store_error invites.
			_ = s.release(ctx, dl, key, token)
			return store.BeginResult{}, s.shortfall(ackBegin, "lease", acked, waitErr)
		}
		return store.BeginResult{State: store.Acquired, Token: token, Fingerprint: fp}, nil
	case isOOM(err):
		// SET is refused when Redis is out of memory, even on a key that
		// exists: look at what is there, so that a completed key still
		// replays and an in-flight one still answers "in flight".
		return s.beginFull(ctx, dl, key, token, err)
	case err != nil:
		return store.BeginResult{}, s.translate("begin", err)
	case tombs != nil:
		return decodeTombReply(tombs.Val(), token)
	}
	old, _ := cmd.Bytes()
	return decodeExisting(old, token)
}

// beginFull reports what is under key after Begin was refused for lack of
// memory (oom), or that refusal when the key is free, by Begin's deadline
// dl.
func (s *Store) beginFull(ctx context.Context, dl time.Time, key, token string, oom error) (store.BeginResult, error) {
	full := s.translate("begin", oom)
	cmd := redis.NewStringCmd(ctx, "get", s.redisKey(key))
	if err := s.do(ctx, dl, cmd, false); err != nil { // redis.Nil: nothing there
		return store.BeginResult{}, full
	}
	old, _ := cmd.Bytes()
	return decodeExisting(old, token)
}

// decodeExisting interprets the value SET NX GET found under the key.
func decodeExisting(old []byte, token string) (store.BeginResult, error) {
	if len(old) == 0 {
		return store.BeginResult{}, fmt.Errorf("redis begin: empty value: %w", store.ErrCorrupt)
	}
	switch old[0] {
	case kindLease:
		if len(old) >= leaseFixed && string(old[leaseHeader:leaseFixed]) == token {
			// A retried SET whose first attempt took the lease.
			res := store.BeginResult{State: store.Acquired, Token: token}
			copy(res.Fingerprint[:], old[1:leaseHeader])
			return res, nil
		}
		l, err := decodeLease(old)
		if err != nil {
			return store.BeginResult{}, fmt.Errorf("redis begin: %w", err)
		}
		return store.BeginResult{State: store.InFlight, Fingerprint: l.Fingerprint, Lease: l}, nil
	case kindRecord:
		rec, err := store.DecodeRecord(old[1:])
		if err != nil {
			return store.BeginResult{}, fmt.Errorf("redis begin: %w", err)
		}
		return store.BeginResult{State: store.Completed, Fingerprint: rec.Fingerprint, Record: rec}, nil
	}
	return store.BeginResult{}, fmt.Errorf("redis begin: unknown kind %#x: %w", old[0], store.ErrCorrupt)
}

// decodeLease reads a lease value: its fingerprint and description. A
// lease written before leases were described (nothing after the token)
// reads as one that describes nothing.
func decodeLease(v []byte) (store.Lease, error) {
	if len(v) < leaseFixed {
		return store.Lease{}, fmt.Errorf("short lease: %w", store.ErrCorrupt)
	}
	var fp store.Fingerprint
	copy(fp[:], v[1:leaseHeader])
	return store.DecodeLease(v[leaseFixed:], fp)
}

// Extend renews the lease of token on key.
func (s *Store) Extend(ctx context.Context, key, token string, lease time.Duration) error {
	n, err := s.extend(ctx, time.Now().Add(s.timeout), s.redisKey(key), token, millis(lease))
	if err != nil {
		return s.translate("extend", err)
	}
	if n == 0 {
		return fmt.Errorf("redis extend: %w", store.ErrLockLost)
	}
	return nil
}

// Complete replaces the lease of token on key with rec, kept for ttl. A
// record with a Tombstone has its tombstone written by the same script.
func (s *Store) Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	now := time.Now()
	dl := now.Add(s.timeout)
	val := make([]byte, 1, 1+store.EncodedSize(rec))
	val[0] = kindRecord
	val = store.AppendRecord(val, rec)
	rkey := s.redisKey(key)
	direct := len(val) > maxPipelined
	var acked int64
	var waitErr error
	send := func(cmd redis.Cmder) error {
		var err error
		switch {
		case s.acks.n == 0:
			return s.do(ctx, dl, cmd, direct)
		case direct:
			acked, waitErr, err = s.doAcked(ctx, dl, rkey, cmd)
		default:
			acked, waitErr, err = s.batch.doAcked(ctx, dl, rkey, cmd)
		}
		return err
	}
	var n int64
	var err error
	if rec.Tombstone > 0 {
		tomb := tombstoneValue(rec.Fingerprint, now.Add(ttl))
		var cmd *redis.Cmd
		cmd, err = s.eval(ctx, completeTombScript, []string{rkey, tombKey(rkey)},
			[]any{token, val, millis(ttl), tomb, millis(ttl + rec.Tombstone)}, send)
		if err == nil {
			n, err = cmd.Int64()
		}
	} else {
		n, err = s.runWith(ctx, completeScript, rkey, []any{token, val, millis(ttl)}, send)
	}
	if err != nil {
		return s.translate("complete", err)
	}
	if n == 0 {
		return fmt.Errorf("redis complete: %w", store.ErrLockLost)
	}
	if s.acks.n > 0 && (waitErr != nil || acked < int64(s.acks.n)) {
		// The record stays written; the caller retries, and the retry
		// writes it again (completeScript) and waits anew.
		return s.shortfall(ackComplete, "record", acked, waitErr)
	}
	return nil
}

// Release deletes the lease of token on key; it does nothing when token does
// not own key.
func (s *Store) Release(ctx context.Context, key, token string) error {
	return s.release(ctx, time.Now().Add(s.timeout), key, token)
}

// release is Release by the deadline dl: its own, or that of the
// operation giving back the lease it took.
func (s *Store) release(ctx context.Context, dl time.Time, key, token string) error {
	_, err := s.run(ctx, dl, releaseScript, false, s.redisKey(key), token)
	return s.translate("release", err)
}

// extend runs extendScript, or on a server that does not know script flags
// (Redis before 7.0, some compatible servers, miniredis) and refuses the
// shebang line as a Lua syntax error, extendScriptLegacy. Without flags,
// Redis (6 and 7 alike) checks memory per command a script calls, and
// PEXPIRE is not one it refuses when out of memory, so the legacy script
// runs then too; the flag keeps that true should a later Redis check
// flagless scripts as a whole.
func (s *Store) extend(ctx context.Context, dl time.Time, key, token string, ms int64) (int64, error) {
	if !s.legacyScripts.Load() {
		n, err := s.run(ctx, dl, extendScript, false, key, token, ms)
		if !flagsUnknown(err) {
			return n, err
		}
		s.legacyScripts.Store(true)
	}
	return s.run(ctx, dl, extendScriptLegacy, false, key, token, ms)
}

// flagsUnknown reports a server that refused a script's flag line as a
// Lua syntax error: one that does not know script flags.
func flagsUnknown(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Error compiling script")
}

// millis converts d to whole milliseconds, at least 1: PX rejects 0.
func millis(d time.Duration) int64 {
	return max(d.Milliseconds(), 1)
}

// do runs cmd and waits for its reply until ctx is done or the deadline
// dl passes. It returns the command's error, or ctx's; in the second case
// cmd must not be read.
//
// dl is the operation's: when it began, plus the store's timeout. An
// operation that sends several commands (a script sent again by its
// source, a look after an out-of-memory refusal, a lease given back) sends
// each by the same deadline, so that the whole is bounded by one timeout.
// A batched command needs no timer of its own: its batch runs until the
// earliest deadline among its commands (batcher), but for an operation's
// later command, which may queue behind batches due after dl and so waits
// with a timer at dl. A direct command, rare, has a context with dl.
//
// Commands are batched (see batcher): those of concurrent requests are
// written to Redis together and their replies read together, a syscall
// and a wake-up of Redis per batch instead of per command. A queued
// command whose deadline passes before it is sent is not sent; one does
// not leave the queue when its caller's context ends, so it may still run
// when Redis answers again, as a command whose reply was lost would (see
// the package documentation for what that does). A direct
// command runs on a pooled connection of the client's own; its context
// bounds the write and the wait for the reply.
func (s *Store) do(ctx context.Context, dl time.Time, cmd redis.Cmder, direct bool) error {
	if direct {
		ctx, cancel := context.WithDeadline(ctx, dl)
		defer cancel()
		return s.c.Process(ctx, cmd)
	}
	return s.batch.do(ctx, dl, cmd)
}

// script is a Lua script run by its SHA-1, and by its source when Redis does
// not have it cached (after a restart, or on a new Cluster node).
type script struct{ src, sha string }

func newScript(src string) script {
	sum := sha1.Sum([]byte(src))
	return script{src: src, sha: hex.EncodeToString(sum[:])}
}

// run runs sc on key by the deadline dl and returns its integer result.
func (s *Store) run(ctx context.Context, dl time.Time, sc script, direct bool, key string, args ...any) (int64, error) {
	return s.runWith(ctx, sc, key, args, func(cmd redis.Cmder) error { return s.do(ctx, dl, cmd, direct) })
}

// runWith is run with the command sent by send.
func (s *Store) runWith(ctx context.Context, sc script, key string, args []any, send func(redis.Cmder) error) (int64, error) {
	cmd, err := s.eval(ctx, sc, []string{key}, args, send)
	if err != nil {
		return 0, err
	}
	return cmd.Int64()
}

// eval runs sc on keys with args, the command sent by send, and returns
// the command with its reply; a nil reply is redis.Nil.
func (s *Store) eval(ctx context.Context, sc script, keys []string, args []any, send func(redis.Cmder) error) (*redis.Cmd, error) {
	cmdArgs := func(op, body string) []any {
		a := make([]any, 0, 3+len(keys)+len(args))
		a = append(a, op, body, len(keys))
		for _, k := range keys {
			a = append(a, k)
		}
		return append(a, args...)
	}
	cmd := redis.NewCmd(ctx, cmdArgs("evalsha", sc.sha)...)
	err := send(cmd)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = redis.NewCmd(ctx, cmdArgs("eval", sc.src)...)
		err = send(cmd)
	}
	return cmd, err
}
