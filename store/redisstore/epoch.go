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
	"time"

	"github.com/redis/go-redis/v9"
)

// A Redis that forgets what it held — restarted without persistence or
// from an older snapshot, flushed, failed over to a replica without the
// data — wipes or rolls back leases and records, and every retry of a
// completed request it no longer holds executes again. The store notices by
// keeping two markers on every master, both outside the key space the
// operator API lists (prefix + "epoch:{tag}…", not prefix + "{key}"):
//
//   - the epoch, prefix + "epoch:{tag}": a random value, set anew only when
//     a proxy notices a loss. One this process saw that is gone means the
//     data went with it; one that holds another value means another proxy
//     noticed first. The run_id alone would miss a FLUSHALL, and a key count
//     would mistake expiry for loss.
//   - this process's mark beside it, prefix + "epoch:{tag}:" + a random id:
//     a counter it advances on every check. A Redis that restarted from a
//     snapshot or AOF older than the last check still has the epoch, but
//     the mark is lower than this process last wrote (or gone): the writes
//     since went with it. A mark per process, not one shared counter,
//     because others' advances would carry a shared one past the value
//     this process remembers. Marks expire after markTTL without a check,
//     so those of stopped proxies do not pile up.
//
// One script per master reads both, compares them with what this process
// knows, sets a fresh epoch on a loss (so every other proxy notices too)
// and advances the mark: checking, re-arming and advancing are one atomic
// round trip, and two proxies noticing at once re-arm once. A process that
// starts learns the markers it finds; what Redis forgot while no proxy ran,
// or lost of the writes after a proxy's last check, cannot be told.
type epochs struct {
	mu      sync.Mutex
	self    string            // this process's mark suffix, random
	known   map[string]marker // epoch key → what this process last saw
	pending []Loss            // found by a check that failed on another master
}

// marker is what this process last saw of one master's markers.
type marker struct {
	epoch string    // the epoch's value
	mark  int64     // the value it last wrote to its mark
	at    time.Time // when
}

// markTTL is how long a mark outlives its process's last check. A mark
// this process wrote longer than markTTL/2 ago (Redis unreachable so long)
// may have expired, and is not compared.
const markTTL = time.Hour

// Loss is one master found to have forgotten the store's keys.
type Loss struct {
	Addr   string // the master's address in a Cluster; "" otherwise
	Marker string // the epoch key that was missing, replaced or rolled back
	Cause  string // "missing", "replaced" or "rolled_back"
}

func (l Loss) String() string {
	where := "redis"
	if l.Addr != "" {
		where = "redis master " + l.Addr
	}
	what := "is gone"
	switch l.Cause {
	case "replaced":
		what = "was set anew (another proxy noticed first)"
	case "rolled_back":
		what = "is there, but this proxy's mark beside it is older than it last wrote: Redis holds an older copy of its data " +
			"(restarted from an older snapshot or AOF, or failed over to a replica that lagged)"
	}
	return fmt.Sprintf("%s forgot the proxy's leases and records: its epoch marker %s %s", where, l.Marker, what)
}

// epochScript checks and advances one master's markers. KEYS[1] is the
// epoch, KEYS[2] this process's mark; ARGV[1] the epoch this process knows
// ("" when none), ARGV[2] the mark it last wrote ("" when it cannot tell),
// ARGV[3] a fresh epoch, ARGV[4] the mark's TTL in ms. It returns the epoch
// now, what was lost ("" when nothing) and the mark now.
var epochScript = newScript(`
local e = redis.call('GET', KEYS[1])
local cause = ''
if not e then
  e, cause = ARGV[3], 'missing'
  redis.call('SET', KEYS[1], e)
elseif ARGV[1] ~= '' and e ~= ARGV[1] then
  cause = 'replaced'
elseif ARGV[2] ~= '' and tonumber(redis.call('GET', KEYS[2]) or '0') < tonumber(ARGV[2]) then
  e, cause = ARGV[3], 'rolled_back'
  redis.call('SET', KEYS[1], e)
end
local n = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return {e, cause, n}
`)

// checkEpochs checks and advances the markers of every master, and reports
// each master that lost data since this process last looked. One script
// call per master. A Redis out of memory refuses the advance: the markers
// are then only read, and a loss is still noticed.
func (s *Store) checkEpochs(ctx context.Context) ([]Loss, error) {
	s.epochs.mu.Lock()
	defer s.epochs.mu.Unlock()
	if s.epochs.known == nil {
		s.epochs.known = map[string]marker{}
		s.epochs.self = newEpoch()[:16]
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
	lost := s.epochs.pending
	s.epochs.pending = nil
	for _, k := range keys {
		cause, err := s.checkEpoch(ctx, k)
		if err != nil {
			// The losses found so far are known now and will not be
			// found again: the next check that completes reports them.
			s.epochs.pending = lost
			return nil, err
		}
		if cause != "" {
			lost = append(lost, Loss{Addr: s.addrOfKey(ctx, k), Marker: k, Cause: cause})
		}
	}
	return lost, nil
}

// checkEpoch runs epochScript on the epoch key k and returns what was lost
// there ("" when nothing, or when this process had not seen k before).
func (s *Store) checkEpoch(ctx context.Context, k string) (string, error) {
	before := s.epochs.known[k]
	seen := before.epoch != "" // a missing epoch seen while Redis was full is reported already
	knownMark := ""
	if seen && time.Since(before.at) < markTTL/2 {
		knownMark = strconv.FormatInt(before.mark, 10)
	}
	mark := s.markKey(k)
	send := func(cmd redis.Cmder) error { return s.c.Process(ctx, cmd) }
	acked := true
	if s.acks.n > 0 {
		// With replica_ack a failover may lose what replicas had not
		// acknowledged, leases and records that were refused anyway: the
		// mark counts as written only once acknowledged, so that losing
		// an unacknowledged advance is not reported as a loss.
		dl := time.Now().Add(s.timeout)
		send = func(cmd redis.Cmder) error {
			n, waitErr, err := s.doAcked(ctx, dl, k, cmd)
			acked = waitErr == nil && n >= int64(s.acks.n)
			return err
		}
	}
	cmd, err := s.eval(ctx, epochScript, []string{k, mark},
		[]any{before.epoch, knownMark, newEpoch(), millis(markTTL)}, send)
	if isOOM(err) {
		return s.peekEpoch(ctx, k, before, knownMark)
	}
	if err != nil {
		return "", fmt.Errorf("epoch marker %s: %w", k, err)
	}
	reply, err := cmd.Slice()
	if err != nil || len(reply) != 3 {
		return "", fmt.Errorf("epoch marker %s: unexpected reply %v: %w", k, reply, err)
	}
	now, _ := reply[0].(string)
	cause, _ := reply[1].(string)
	n, _ := reply[2].(int64)
	m := marker{epoch: now, mark: n, at: time.Now()}
	switch {
	case !acked && cause == "":
		m.mark, m.at = before.mark, before.at // none on a first look: nothing to compare
	case !acked:
		m.mark, m.at = 0, time.Time{} // the loss voids what was known
	}
	s.epochs.known[k] = m
	if !seen {
		return "", nil // a first look: nothing to compare with
	}
	return cause, nil
}

// peekEpoch is epochScript without its writes, for a Redis that refuses
// them for lack of memory: the epoch gone or replaced, or the mark behind,
// is a loss. What this process knows is left as it was, except that a loss
// is reported once: the markers are re-armed by the first check Redis has
// room for.
func (s *Store) peekEpoch(ctx context.Context, k string, before marker, knownMark string) (string, error) {
	values, err := s.getAll(ctx, []string{k, s.markKey(k)})
	if err != nil || before.epoch == "" {
		return "", err
	}
	// The same tests as epochScript's.
	cause := ""
	mark, _ := strconv.ParseInt(values[1], 10, 64)
	switch {
	case values[0] == "":
		cause = "missing"
	case values[0] != before.epoch:
		cause = "replaced"
	case knownMark != "" && mark < before.mark:
		cause = "rolled_back"
	}
	if cause != "" {
		s.epochs.known[k] = marker{epoch: values[0], mark: mark, at: time.Now()}
	}
	return cause, nil
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

// markKey is this process's mark beside the epoch key k: the same hash
// tag, so one script reaches both on a Cluster.
func (s *Store) markKey(k string) string { return k + ":" + s.epochs.self }

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
		if tag, ok := firstTag(ranges); ok {
			keys = append(keys, s.markerKey(tag))
		}
	}
	slices.Sort(keys)
	return keys, nil
}

// firstTag is the first tag, "0", "1", …, whose hash slot lies in one of
// ranges (each from its first slot to its last, both included). Every slot
// is the slot of a tag below 1<<20.
func firstTag(ranges [][2]int) (string, bool) {
	for tag := 0; tag < 1<<20; tag++ {
		t := strconv.Itoa(tag)
		slot := keySlot(t)
		if slices.ContainsFunc(ranges, func(r [2]int) bool { return slot >= r[0] && slot <= r[1] }) {
			return t, true
		}
	}
	return "", false
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
