package redisstore

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Inspect returns the lease or record under key, or store.ErrNotFound: one
// GET and one PTTL, pipelined.
func (s *Store) Inspect(ctx context.Context, key string) (store.Entry, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	rk := s.redisKey(key)
	var get *redis.StringCmd
	var ttl *redis.DurationCmd
	_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		get, ttl = p.Get(ctx, rk), p.PTTL(ctx, rk)
		return nil
	})
	switch {
	case errors.Is(get.Err(), redis.Nil):
		return store.Entry{}, fmt.Errorf("redis inspect: %w", store.ErrNotFound)
	case err != nil:
		return store.Entry{}, s.translate("inspect", err)
	}
	v, _ := get.Bytes()
	return decodeEntry(key, v, ttl.Val(), true)
}

// Delete removes the lease or record under key and its tombstone, or
// returns store.ErrNotFound when there was no lease or record. The owner of a deleted lease then gets
// store.ErrLockLost from Extend and Complete: their scripts find no lease
// with its token.
func (s *Store) Delete(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	found, err := s.deleteWithTombstone(ctx, key, s.redisKey(key))
	if err != nil {
		return s.translate("delete", err)
	}
	if !found {
		return fmt.Errorf("redis delete: %w", store.ErrNotFound)
	}
	return nil
}

// decodeEntry describes the value v of key, which expires in ttl (PTTL's
// answer: negative when the key has no expiry, 0 in its last millisecond).
func decodeEntry(key string, v []byte, ttl time.Duration, withBody bool) (store.Entry, error) {
	e := store.Entry{Key: key, ExpiresAt: expiresIn(ttl)}
	switch {
	case len(v) > 0 && v[0] == kindLease:
		l, err := decodeLease(v)
		if err != nil {
			return store.Entry{}, fmt.Errorf("redis key %s: %w", key, err)
		}
		e.State, e.Fingerprint, e.Lease = store.InFlight, l.Fingerprint, l
		return e, nil
	case len(v) > 0 && v[0] == kindRecord:
		rec, err := store.DecodeRecord(v[1:])
		if err != nil {
			return store.Entry{}, fmt.Errorf("redis key %s: %w", key, err)
		}
		e.State, e.Fingerprint, e.Record, e.BodyBytes = store.Completed, rec.Fingerprint, rec, rec.BodyBytes()
		if !withBody {
			rec.Body = nil
		}
		return e, nil
	}
	return store.Entry{}, fmt.Errorf("redis key %s: unknown value: %w", key, store.ErrCorrupt)
}

// expiresIn is when a key whose PTTL is ttl expires: zero when it has no
// expiry (ttl negative).
func expiresIn(ttl time.Duration) time.Time {
	if ttl < 0 {
		return time.Time{}
	}
	return time.Now().Add(ttl).UTC().Truncate(time.Millisecond)
}

// List returns up to limit entries in state (0 for all) from cursor on
// ("" to start), and the cursor of the next page ("" when done). It SCANs
// the store's keys (MATCH on its prefix, never KEYS) on every master in
// turn. SCAN returns every key present for the whole listing, but may
// return one twice while Redis resizes its table; within a page keys are
// unique. A Cluster moving a slot meanwhile is listed on: each key is
// read where it is now (fetch), and one moved between two masters while
// the listing runs may be listed on both, or on neither when it went to
// a master listed already. Listed records carry no Body. A page reads at most listBytes of
// values (and at least one), ending early with a cursor when the next
// value would pass that: a page of large records never holds more.
func (s *Store) List(ctx context.Context, state store.State, cursor string, limit int) ([]store.Entry, string, error) {
	if limit <= 0 {
		return nil, "", errors.New("redis list: limit must be positive")
	}
	pos, err := parseCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	nodes, err := s.masters(ctx)
	if err != nil {
		return nil, "", s.translate("list", err)
	}
	i := 0
	if cursor != "" {
		i = slices.IndexFunc(nodes, func(n node) bool { return n.addr == pos.addr })
	}
	if i < 0 {
		return nil, "", fmt.Errorf("redis list: cursor names %s, no longer a master; start again", pos.addr)
	}
	var out []store.Entry
	budget := listBytes
	for ; i < len(nodes); i, pos = i+1, (listPos{}) {
		n := nodes[i]
		for {
			keys, next, err := s.scan(ctx, n, pos.scan, limit)
			if err != nil {
				return nil, "", s.translate("list", err)
			}
			entries, lastKeys, stop, err := s.fetch(ctx, n, keys, pos.after, state, &budget, len(out) == 0)
			if err != nil {
				return nil, "", err
			}
			for j, e := range entries {
				out = append(out, e)
				if len(out) < limit {
					continue
				}
				// The page is full: resume in this batch after this key,
				// or after the batch when it was the batch's last.
				switch {
				case lastKeys[j] != keys[len(keys)-1]:
					return out, listPos{addr: n.addr, scan: pos.scan, after: lastKeys[j]}.String(), nil
				case next != 0:
					return out, listPos{addr: n.addr, scan: next}.String(), nil
				case i+1 < len(nodes):
					return out, listPos{addr: nodes[i+1].addr}.String(), nil
				}
				return out, "", nil
			}
			if stop != nil {
				// The page read what it may: resume after the last key
				// read (or where this batch began, when none was).
				return out, listPos{addr: n.addr, scan: pos.scan, after: *stop}.String(), nil
			}
			if next == 0 {
				break
			}
			pos = listPos{addr: n.addr, scan: next}
		}
	}
	return out, "", nil
}

// scan runs one SCAN on n and returns the store's keys it found, sorted,
// and the next SCAN cursor.
func (s *Store) scan(ctx context.Context, n node, cur uint64, count int) ([]string, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	keys, next, err := n.c.Scan(ctx, cur, globEscape(s.prefix)+"{*}", int64(max(count, 10))).Result()
	if err != nil {
		return nil, 0, err
	}
	slices.Sort(keys)
	return slices.Compact(keys), next, nil
}

// listBytes is how many bytes of values one page of a listing reads at
// most: its records' bodies are read with them, so a page of limit records
// of max_response_body each would otherwise hold them all at once.
var listBytes = 16 << 20

// fetch reads the keys after `after` (Redis keys, sorted, SCANned on n)
// and returns the entries in state, each with its Redis key. Keys gone
// meanwhile are left out; a value that does not decode is an unreadable
// entry (store.UnreadableEntry). It reads values while their sizes fit in
// *budget, which it lowers by what it read, and one at least when first:
// stop, when it stopped before the batch's end, is the last key it read
// (after, when it read none).
//
// The values are read through the store's client, not the master the
// keys were SCANned on: while a Cluster moves a slot, a key already moved
// is on a master that answers MOVED for it until the move ends, and one
// the master moving it no longer has is answered ASK. The Cluster client
// follows both, so a listing reads each key where it is now. An error
// names n.
func (s *Store) fetch(ctx context.Context, n node, keys []string, after string, state store.State, budget *int, first bool) (entries []store.Entry, rkeys []string, stop *string, err error) {
	if after != "" {
		keys = keys[sort(keys, after):]
	}
	if len(keys) == 0 {
		return nil, nil, nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	lens := make([]*redis.IntCmd, len(keys))
	if _, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			lens[i] = p.StrLen(ctx, k)
		}
		return nil
	}); err != nil {
		return nil, nil, nil, s.translate("list", fmt.Errorf("%s%w", at(n), err))
	}
	last := after
	for i, l := range lens {
		if int(l.Val()) > *budget && !(first && i == 0) {
			keys, stop = keys[:i], &last
			break
		}
		*budget -= int(l.Val())
		last = keys[i]
	}
	if len(keys) == 0 {
		return nil, nil, stop, nil
	}
	gets := make([]*redis.StringCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	_, err = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			gets[i], ttls[i] = p.Get(ctx, k), p.PTTL(ctx, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, nil, s.translate("list", fmt.Errorf("%s%w", at(n), err))
	}
	for i, k := range keys {
		v, err := gets[i].Bytes()
		if err != nil {
			continue // expired or deleted since the SCAN
		}
		if strings.HasSuffix(k, store.TombstoneSuffix+"}") {
			continue // an earlier version's tombstone (tombstone.go)
		}
		e, err := decodeEntry(s.storageKey(k), v, ttls[i].Val(), false)
		if errors.Is(err, store.ErrUnreadable) {
			e = store.UnreadableEntry(s.storageKey(k), len(v) > 0 && v[0] == kindLease, expiresIn(ttls[i].Val()), err)
		} else if err != nil {
			return nil, nil, nil, fmt.Errorf("redis list: %w", err)
		}
		if state == 0 || e.State == state {
			entries = append(entries, e)
			rkeys = append(rkeys, k)
		}
	}
	return entries, rkeys, stop, nil
}

// sort returns the index of the first key in sorted keys above after.
func sort(keys []string, after string) int {
	i, found := slices.BinarySearch(keys, after)
	if found {
		i++
	}
	return i
}

// storageKey is the inverse of redisKey.
func (s *Store) storageKey(rk string) string {
	k := strings.TrimPrefix(rk, s.prefix)
	return strings.TrimSuffix(strings.TrimPrefix(k, "{"), "}")
}

// globEscape escapes the characters SCAN's MATCH gives a meaning to.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// listPos is where a listing stopped: a master (its address, "" when there
// is one), a SCAN cursor on it, and the last Redis key returned from the
// batch that cursor starts, when the page ended inside it. Resuming runs
// that SCAN again and skips the keys up to that one: a batch's keys are
// taken in sorted order, so the keys present all along are neither missed
// nor repeated, even when the batch gained keys meanwhile.
type listPos struct {
	addr  string
	scan  uint64
	after string
}

func (p listPos) String() string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(p.addr)) + "." + strconv.FormatUint(p.scan, 10) + "." + enc([]byte(p.after))
}

func parseCursor(c string) (listPos, error) {
	if c == "" {
		return listPos{}, nil
	}
	parts := strings.Split(c, ".")
	if len(parts) == 3 {
		addr, err1 := base64.RawURLEncoding.DecodeString(parts[0])
		scan, err2 := strconv.ParseUint(parts[1], 10, 64)
		after, err3 := base64.RawURLEncoding.DecodeString(parts[2])
		if err1 == nil && err2 == nil && err3 == nil {
			return listPos{addr: string(addr), scan: scan, after: string(after)}, nil
		}
	}
	return listPos{}, fmt.Errorf("redis list: malformed cursor %q", c)
}
