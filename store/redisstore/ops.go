package redisstore

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Value kinds, the first byte of every value.
const (
	kindLease  = 'L'
	kindRecord = 'R'
	// leaseHeader is the kind byte plus the fingerprint; the token follows.
	leaseHeader = 1 + len(store.Fingerprint{})
	tokenLen    = 32
)

// The scripts check that the key holds a lease whose token (the value from
// byte leaseHeader+1 on, in Lua's 1-based indexing) is ARGV[1].
var (
	completeScript = newScript(`
local v = redis.call('GET', KEYS[1])
if v and string.byte(v, 1) == 76 and string.sub(v, 34) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
-- A retry whose first attempt stored this very record succeeded.
if v == ARGV[2] then return 1 end
return 0`)
	extendScript = newScript(`
local v = redis.call('GET', KEYS[1])
if v and string.byte(v, 1) == 76 and string.sub(v, 34) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`)
	releaseScript = newScript(`
local v = redis.call('GET', KEYS[1])
if v and string.byte(v, 1) == 76 and string.sub(v, 34) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)
)

// Begin takes a lease on key with one SET NX PX GET, or reports the lease or
// record already there.
func (s *Store) Begin(ctx context.Context, key string, fp store.Fingerprint, lease time.Duration) (store.BeginResult, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	val := make([]byte, leaseHeader+tokenLen)
	val[0] = kindLease
	copy(val[1:], fp[:])
	var raw [tokenLen / 2]byte
	_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails (Go 1.24+)
	hex.Encode(val[leaseHeader:], raw[:])
	token := string(val[leaseHeader:])

	cmd := redis.NewStringCmd(ctx, "set", s.redisKey(key), val, "px", millis(lease), "nx", "get")
	err := s.do(ctx, cmd, false)
	switch {
	case errors.Is(err, redis.Nil):
		return store.BeginResult{State: store.Acquired, Token: token, Fingerprint: fp}, nil
	case err != nil:
		return store.BeginResult{}, translate("begin", err)
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
		if len(old) < leaseHeader {
			return store.BeginResult{}, fmt.Errorf("redis begin: short lease: %w", store.ErrCorrupt)
		}
		var fp store.Fingerprint
		copy(fp[:], old[1:leaseHeader])
		if string(old[leaseHeader:]) == token {
			// A retried SET whose first attempt took the lease.
			return store.BeginResult{State: store.Acquired, Token: token, Fingerprint: fp}, nil
		}
		return store.BeginResult{State: store.InFlight, Fingerprint: fp}, nil
	case kindRecord:
		rec, err := store.DecodeRecord(old[1:])
		if err != nil {
			return store.BeginResult{}, fmt.Errorf("redis begin: %w", err)
		}
		return store.BeginResult{State: store.Completed, Fingerprint: rec.Fingerprint, Record: rec}, nil
	}
	return store.BeginResult{}, fmt.Errorf("redis begin: unknown kind %#x: %w", old[0], store.ErrCorrupt)
}

// Extend renews the lease of token on key.
func (s *Store) Extend(ctx context.Context, key, token string, lease time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	n, err := s.run(ctx, extendScript, false, s.redisKey(key), token, millis(lease))
	if err != nil {
		return translate("extend", err)
	}
	if n == 0 {
		return fmt.Errorf("redis extend: %w", store.ErrLockLost)
	}
	return nil
}

// Complete replaces the lease of token on key with rec, kept for ttl.
func (s *Store) Complete(ctx context.Context, key, token string, rec *store.Record, ttl time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	val := make([]byte, 1, 1+store.EncodedSize(rec))
	val[0] = kindRecord
	val = store.AppendRecord(val, rec)
	n, err := s.run(ctx, completeScript, len(val) > maxPipelined, s.redisKey(key), token, val, millis(ttl))
	if err != nil {
		return translate("complete", err)
	}
	if n == 0 {
		return fmt.Errorf("redis complete: %w", store.ErrLockLost)
	}
	return nil
}

// Release deletes the lease of token on key; it does nothing when token does
// not own key.
func (s *Store) Release(ctx context.Context, key, token string) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	_, err := s.run(ctx, releaseScript, false, s.redisKey(key), token)
	return translate("release", err)
}

// Get returns the completed record under key, or store.ErrNotFound when the
// key is absent or in flight.
func (s *Store) Get(ctx context.Context, key string) (*store.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	cmd := redis.NewStringCmd(ctx, "get", s.redisKey(key))
	switch err := s.do(ctx, cmd, false); {
	case errors.Is(err, redis.Nil):
		return nil, store.ErrNotFound
	case err != nil:
		return nil, translate("get", err)
	}
	b, _ := cmd.Bytes()
	if len(b) == 0 || b[0] != kindRecord {
		return nil, store.ErrNotFound
	}
	rec, err := store.DecodeRecord(b[1:])
	if err != nil {
		return nil, fmt.Errorf("redis get: %w", err)
	}
	return rec, nil
}

// millis converts d to whole milliseconds, at least 1: PX rejects 0.
func millis(d time.Duration) int64 {
	return max(d.Milliseconds(), 1)
}

// do runs cmd and waits for its reply until ctx is done. It returns the
// command's error, or ctx's; in the second case cmd must not be read.
//
// Commands go through the auto-pipeliner, which writes the commands of
// concurrent requests to Redis together and reads their replies together:
// a syscall, and a wake-up of Redis, per batch instead of per command. Its
// commands do not honour their context once queued, so a command whose
// caller gave up may still run when Redis answers again, as a command whose
// reply was lost would (see the package documentation for what that does).
// A direct command runs on a pooled connection of the client's own; its
// context bounds the write and the wait for the reply.
func (s *Store) do(ctx context.Context, cmd redis.Cmder, direct bool) error {
	if direct {
		return s.c.Process(ctx, cmd)
	}
	return s.ap.Submit(ctx, cmd).WaitContext(ctx)
}

// script is a Lua script run by its SHA-1, and by its source when Redis does
// not have it cached (after a restart, or on a new Cluster node).
type script struct{ src, sha string }

func newScript(src string) script {
	sum := sha1.Sum([]byte(src))
	return script{src: src, sha: hex.EncodeToString(sum[:])}
}

// run runs sc on key and returns its integer result.
func (s *Store) run(ctx context.Context, sc script, direct bool, key string, args ...any) (int64, error) {
	cmd := redis.NewCmd(ctx, append([]any{"evalsha", sc.sha, 1, key}, args...)...)
	err := s.do(ctx, cmd, direct)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = redis.NewCmd(ctx, append([]any{"eval", sc.src, 1, key}, args...)...)
		err = s.do(ctx, cmd, direct)
	}
	if err != nil {
		return 0, err
	}
	return cmd.Int64()
}
