package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

// A Redis that forgets what it held — restarted without persistence,
// flushed, failed over to a replica without the data — wipes every lease and
// record, and every retry of a completed request executes again. The store
// notices by keeping a marker on every master (an epoch: a random value set
// once) and reading it back: a marker this process saw that is gone, or
// holds another value (another proxy noticed first and set a new one), means
// the data went with it. The run_id alone would miss a FLUSHALL, and a key
// count would mistake expiry for loss. Markers live outside the key space
// the operator API lists (prefix + "epoch:{tag}", not prefix + "{key}").
//
// A marker is looked at with one SET NX GET per master: it creates a
// missing marker and returns the one there, so checking and re-arming are
// one round trip. A process that starts learns the markers it finds; what
// Redis forgot while no proxy ran cannot be told from a first start.
type epochs struct {
	mu    sync.Mutex
	known map[string]string // marker key → the value this process last saw
}

// Loss is one master found to have forgotten the store's keys.
type Loss struct {
	Addr   string // the master's address in a Cluster; "" otherwise
	Marker string // the marker key that was missing or replaced
	Cause  string // "missing" or "replaced"
}

func (l Loss) String() string {
	where := "redis"
	if l.Addr != "" {
		where = "redis master " + l.Addr
	}
	what := "is gone"
	if l.Cause == "replaced" {
		what = "was set anew (another proxy noticed first)"
	}
	return fmt.Sprintf("%s forgot the proxy's leases and records: its epoch marker %s %s", where, l.Marker, what)
}

// checkEpochs reads the marker of every master, creates the missing ones,
// and reports each that changed since this process last saw it. Normally
// one round trip (a GET per master, pipelined); a missing marker costs a
// SET NX GET more. A marker that cannot be created (Redis out of memory) is
// reported once, not on every check.
func (s *Store) checkEpochs(ctx context.Context) ([]Loss, error) {
	s.epochs.mu.Lock()
	defer s.epochs.mu.Unlock()
	if s.epochs.known == nil {
		s.epochs.known = map[string]string{}
	}
	keys, err := s.markerKeys(ctx)
	if err != nil {
		return nil, err
	}
	for k := range s.epochs.known {
		if !slices.Contains(keys, k) {
			keys = append(keys, k) // its slot moved: it must still be there
		}
	}
	slices.Sort(keys)
	values, err := s.getAll(ctx, keys)
	if err != nil {
		return nil, err
	}
	var lost []Loss
	for i, k := range keys {
		now := values[i]
		created := false
		if now == "" {
			fresh := newEpoch()
			old, err := s.c.SetArgs(ctx, k, fresh, redis.SetArgs{Mode: "NX", Get: true}).Result()
			switch {
			case errors.Is(err, redis.Nil):
				now, created = fresh, true
			case err == nil:
				now = old // another proxy set it a moment ago
			}
		}
		if before := s.epochs.known[k]; before != "" && before != now {
			cause := "replaced"
			if now == "" || created {
				cause = "missing"
			}
			lost = append(lost, Loss{Addr: s.addrOfKey(ctx, k), Marker: k, Cause: cause})
		}
		s.epochs.known[k] = now
	}
	return lost, nil
}

// getAll GETs keys in one pipeline; a missing key reads as "".
func (s *Store) getAll(ctx context.Context, keys []string) ([]string, error) {
	cmds := make([]*redis.StringCmd, len(keys))
	_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.Get(ctx, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("epoch markers: %w", err)
	}
	out := make([]string, len(keys))
	for i, c := range cmds {
		v, err := c.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("epoch marker %s: %w", keys[i], err)
		}
		out[i] = v
	}
	return out, nil
}

func newEpoch() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

func (s *Store) markerKey(tag string) string { return s.prefix + "epoch:{" + tag + "}" }

// markerKeys names one marker per master: for a Cluster, the first tag
// "0", "1", … whose hash slot that master serves; otherwise tag "0".
func (s *Store) markerKeys(ctx context.Context) ([]string, error) {
	cc, ok := s.c.(*redis.ClusterClient)
	if !ok {
		return []string{s.markerKey("0")}, nil
	}
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SLOTS: %w", err)
	}
	owner := map[string][][2]int{} // master address → its slot ranges
	for _, r := range slots {
		if len(r.Nodes) > 0 {
			owner[r.Nodes[0].Addr] = append(owner[r.Nodes[0].Addr], [2]int{r.Start, r.End})
		}
	}
	var keys []string
	for _, ranges := range owner {
		for tag := 0; tag < 1<<20; tag++ {
			slot := keySlot(strconv.Itoa(tag))
			if slices.ContainsFunc(ranges, func(r [2]int) bool { return slot >= r[0] && slot <= r[1] }) {
				keys = append(keys, s.markerKey(strconv.Itoa(tag)))
				break
			}
		}
	}
	slices.Sort(keys)
	return keys, nil
}

// addrOfKey names the Cluster master serving k, for the log line; "" when
// not a Cluster or not known.
func (s *Store) addrOfKey(ctx context.Context, k string) string {
	cc, ok := s.c.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	c, err := cc.MasterForKey(ctx, k)
	if err != nil {
		return ""
	}
	return c.Options().Addr
}

// keySlot is Redis Cluster's hash slot of a hash tag: CRC16 (XMODEM) mod
// 16384, as the Cluster specification defines it.
func keySlot(tag string) int {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc % 16384)
}
