package redisstore

import (
	"context"
	"crypto/rand"
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
	completeScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and string.byte(v, 1) == 76 and string.sub(v, 34) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
-- A retry whose first attempt stored this very record succeeded.
if v == ARGV[2] then return 1 end
return 0`)
	extendScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and string.byte(v, 1) == 76 and string.sub(v, 34) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`)
	releaseScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and string.byte(v, 1) == 76 and string.sub(v, 34) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)
)

// Begin takes a lease on key with one SET NX PX GET, or reports the lease or
// record already there.
func (s *Store) Begin(ctx context.Context, key string, fp store.Fingerprint, lease time.Duration) (store.Begin, error) {
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
	_ = s.c.Process(ctx, cmd)
	old, err := cmd.Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return store.Begin{State: store.Acquired, Token: token, Fingerprint: fp}, nil
	case err != nil:
		return store.Begin{}, translate("begin", err)
	}
	return decodeExisting(old, token)
}

// decodeExisting interprets the value SET NX GET found under the key.
func decodeExisting(old []byte, token string) (store.Begin, error) {
	if len(old) == 0 {
		return store.Begin{}, fmt.Errorf("redis begin: empty value: %w", store.ErrCorrupt)
	}
	switch old[0] {
	case kindLease:
		if len(old) < leaseHeader {
			return store.Begin{}, fmt.Errorf("redis begin: short lease: %w", store.ErrCorrupt)
		}
		var fp store.Fingerprint
		copy(fp[:], old[1:leaseHeader])
		if string(old[leaseHeader:]) == token {
			// A retried SET whose first attempt took the lease.
			return store.Begin{State: store.Acquired, Token: token, Fingerprint: fp}, nil
		}
		return store.Begin{State: store.InFlight, Fingerprint: fp}, nil
	case kindRecord:
		rec, err := store.DecodeRecord(old[1:])
		if err != nil {
			return store.Begin{}, fmt.Errorf("redis begin: %w", err)
		}
		return store.Begin{State: store.Completed, Fingerprint: rec.Fingerprint, Record: rec}, nil
	}
	return store.Begin{}, fmt.Errorf("redis begin: unknown kind %#x: %w", old[0], store.ErrCorrupt)
}

// Extend renews the lease of token on key.
func (s *Store) Extend(ctx context.Context, key, token string, lease time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	n, err := extendScript.Run(ctx, s.c, []string{s.redisKey(key)}, token, millis(lease)).Int()
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
	n, err := completeScript.Run(ctx, s.c, []string{s.redisKey(key)}, token, val, millis(ttl)).Int()
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
	return translate("release", releaseScript.Run(ctx, s.c, []string{s.redisKey(key)}, token).Err())
}

// Get returns the completed record under key, or store.ErrNotFound when the
// key is absent or in flight.
func (s *Store) Get(ctx context.Context, key string) (*store.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	b, err := s.c.Get(ctx, s.redisKey(key)).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, store.ErrNotFound
	case err != nil:
		return nil, translate("get", err)
	case len(b) == 0 || b[0] != kindRecord:
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
