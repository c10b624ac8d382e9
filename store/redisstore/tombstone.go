package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// The store keeps the tombstones of expired_keys: reject itself
// (store.TombstoneKeeper), each under its record's Redis key followed by
// store.TombstoneSuffix. The suffix sits after the braces, so a tombstone
// has its record's hash tag and Cluster slot, and one script can read or
// write both; and List's MATCH pattern, which ends in the closing brace,
// does not see it. The value is
//
//	'T' fingerprint(32 bytes) expiry(8 bytes)    with PX = ttl + window
//
// the expiry being when the record expires, in Unix milliseconds, big
// endian.
//
// An earlier version kept tombstones through store.Tombstones: a record
// (kind 'R', status 410, CreatedAt when the key's record expires) under
// the storage key key + TombstoneSuffix, whose Redis key has a hash tag
// of its own. Begin still reads those: in its script on a single node or
// behind Sentinel (the script may read any key there), with a GET beside
// the script in a Cluster, where they are in another slot.
const (
	kindTombstone = 'T'
	tombstoneLen  = 1 + len(store.Fingerprint{}) + 8
)

var (
	// beginTombScript is Begin's SET NX PX GET with the tombstone looked
	// for first: it returns the value under KEYS[1], or else the
	// tombstone under KEYS[2], or else, in a table, the earlier version's
	// tombstone under KEYS[3] when given; or it takes the lease (ARGV[1]
	// for ARGV[2] ms) and returns nil.
	beginTombScript = newScript(`local v = redis.call('GET', KEYS[1])
if v then return v end
v = redis.call('GET', KEYS[2])
if v then return v end
if KEYS[3] then
  v = redis.call('GET', KEYS[3])
  if v then return {v} end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false`)

	// completeTombScript is completeScript that also writes the
	// tombstone ARGV[4] under KEYS[2] for ARGV[5] ms, in the same step.
	completeTombScript = newScript(leaseCheck + `if owned then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
elseif v == ARGV[2] then
  redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
else
  return 0
end
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5])
return 1`)
)

// CheckTombstones switches looking for tombstones in Begin on or off
// (store.TombstoneKeeper). Off, Begin is the one SET NX PX GET; on, it is
// one script that reads the tombstone too. A Complete whose record has a
// Tombstone writes it either way.
func (s *Store) CheckTombstones(on bool) { s.tombs.Store(on) }

// tombKey is the Redis key of the tombstone of the record under rkey.
func tombKey(rkey string) string { return rkey + store.TombstoneSuffix }

// tombstoneValue encodes a tombstone of a record with fingerprint fp that
// expires at expiry.
func tombstoneValue(fp store.Fingerprint, expiry time.Time) []byte {
	v := make([]byte, 1, tombstoneLen)
	v[0] = kindTombstone
	v = append(v, fp[:]...)
	return binary.BigEndian.AppendUint64(v, uint64(expiry.UnixMilli()))
}

// expired is what Begin reports for a tombstone of a record with
// fingerprint fp that expired, or was to expire, at expiry: a record that
// went before its time (an eviction, a flush) expired now.
func expired(fp store.Fingerprint, expiry time.Time) store.BeginResult {
	if now := time.Now(); now.Before(expiry) {
		expiry = now
	}
	return store.BeginResult{State: store.Expired, Fingerprint: fp, ExpiredAt: expiry.UTC()}
}

// decodeTombstone reads a tombstone value.
func decodeTombstone(v []byte) (store.BeginResult, error) {
	if len(v) != tombstoneLen {
		return store.BeginResult{}, fmt.Errorf("redis begin: tombstone of %d bytes: %w", len(v), store.ErrCorrupt)
	}
	var fp store.Fingerprint
	copy(fp[:], v[1:])
	ms := int64(binary.BigEndian.Uint64(v[1+len(fp):]))
	return expired(fp, time.UnixMilli(ms)), nil
}

// beginTombs runs Begin's command with tombstones on, beginTombScript,
// sent by send; redis.Nil means it took the lease. In a Cluster an
// earlier version's tombstone is in another slot: a GET of it is queued
// just before the script, most often into the same batch and so the same
// round trip, and a lease the script took on a key it remembers is given
// back.
func (s *Store) beginTombs(ctx context.Context, dl time.Time, key, rkey string, val []byte, lease time.Duration, token string, send func(redis.Cmder) error) (*redis.Cmd, error) {
	keys := []string{rkey, tombKey(rkey)}
	legacyKey := s.redisKey(key + store.TombstoneSuffix)
	if _, cluster := s.c.(*redis.ClusterClient); !cluster {
		return s.eval(ctx, beginTombScript, append(keys, legacyKey), []any{val, millis(lease)}, send)
	}
	legacy := redis.NewStringCmd(ctx, "get", legacyKey)
	q, qerr := s.batch.enqueue(legacy, dl, "", false)
	cmd, err := s.eval(ctx, beginTombScript, keys, []any{val, millis(lease)}, send)
	if qerr == nil {
		_, _, qerr = s.batch.await(ctx, q)
	}
	if !errors.Is(err, redis.Nil) || errors.Is(qerr, redis.Nil) {
		return cmd, err // found something, failed, or nothing remembered
	}
	// The lease is taken; the key is remembered, or unknown whether it is.
	_ = s.release(ctx, dl, key, token)
	if qerr != nil {
		return cmd, fmt.Errorf("earlier tombstone: %w", qerr)
	}
	v, _ := legacy.Result()
	cmd.SetErr(nil)
	cmd.SetVal([]any{v})
	return cmd, nil
}

// decodeTombReply interprets what beginTombScript found.
func decodeTombReply(reply any, token string) (store.BeginResult, error) {
	switch v := reply.(type) {
	case string:
		if len(v) > 0 && v[0] == kindTombstone {
			return decodeTombstone([]byte(v))
		}
		return decodeExisting([]byte(v), token)
	case []any:
		if t, ok := v[0].(string); len(v) == 1 && ok && len(t) > 0 && t[0] == kindRecord {
			rec, err := store.DecodeRecord([]byte(t[1:]))
			if err != nil {
				return store.BeginResult{}, fmt.Errorf("redis begin: earlier tombstone: %w", err)
			}
			return expired(rec.Fingerprint, rec.CreatedAt), nil
		}
	}
	return store.BeginResult{}, fmt.Errorf("redis begin: unexpected reply %T: %w", reply, store.ErrCorrupt)
}

// deleteWithTombstone deletes the key under rkey, its tombstone and an
// earlier version's tombstone of key in one round trip, and reports
// whether the key itself was there.
func (s *Store) deleteWithTombstone(ctx context.Context, key, rkey string) (bool, error) {
	var del *redis.IntCmd
	_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		del = p.Del(ctx, rkey)
		p.Del(ctx, tombKey(rkey))
		p.Del(ctx, s.redisKey(key+store.TombstoneSuffix))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, err
	}
	return del.Val() > 0, nil
}
