package proxy

import (
	"crypto/sha256"
	"hash/maphash"
	"sync"
	"time"
)

// Key churn: a request whose fingerprint and scope equal those of an
// earlier one under another key, within churn_window — a client minting a
// new key per attempt, which no idempotency layer can save
// (docs/operating.md, "Rolling out in front of a legacy service").

// DefaultChurnWindow is how long a fingerprint is remembered for key
// churn: longer than clients retry, short enough that an identical new
// operation is rarely counted.
const DefaultChurnWindow = 10 * time.Minute

// DefaultChurnMaxEntries bounds the fingerprints a route remembers: 100,000
// of them take about 5 MB (churnEntryBytes each).
const DefaultChurnMaxEntries = 100_000

// churnEntryBytes is the memory one remembered fingerprint takes: a 16-byte
// id and a 16-byte churnSeen, with the map's own overhead (52 bytes
// measured by TestChurnHoldsAtMostMaxEntries, which logs it).
const churnEntryBytes = 52

// churnID is a fingerprint and scope, hashed: never the body itself.
type churnID [16]byte

// churnSeen is the key a fingerprint was last sent under, and when.
type churnSeen struct {
	key uint64 // the key_hash, hashed
	at  int64  // Unix nanoseconds
}

// churn remembers which key each fingerprint of one route was last sent
// under. It holds two generations: when the current one is half of max,
// it becomes the old one and the oldest is dropped, so at most max
// fingerprints are held. A reload keeps a route's churn (adopt).
type churn struct {
	seed maphash.Seed
	mu   sync.Mutex
	cur  map[churnID]churnSeen
	old  map[churnID]churnSeen
}

func newChurn() *churn {
	return &churn{seed: maphash.MakeSeed(), cur: map[churnID]churnSeen{}}
}

// churnIDOf is the id of a request's fingerprint under its scope.
func churnIDOf(fp [32]byte, scope [16]byte) churnID {
	var b [48]byte
	copy(b[:16], scope[:])
	copy(b[16:], fp[:])
	sum := sha256.Sum256(b[:])
	return churnID(sum[:16])
}

// observe reports whether id was sent under a key other than keyHash
// within window before now, and remembers it under keyHash; limit bounds
// the fingerprints held.
func (c *churn) observe(id churnID, keyHash string, now time.Time, window time.Duration, limit int) bool {
	seen := churnSeen{key: maphash.String(c.seed, keyHash), at: now.UnixNano()}
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, inCur := c.cur[id]
	ok := inCur
	if !ok {
		prev, ok = c.old[id]
	}
	if !inCur && len(c.cur) >= max(1, limit/2) {
		c.old, c.cur = c.cur, make(map[churnID]churnSeen, len(c.cur))
	}
	c.cur[id] = seen
	return ok && prev.key != seen.key && seen.at-prev.at <= int64(window)
}

// len is how many fingerprints c holds.
func (c *churn) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur) + len(c.old)
}

// countChurn counts q in idempotency_proxy_key_churn_total when its
// fingerprint and scope were sent under another key within churn_window.
// It runs under both modes, before the store is asked.
func (h *Handler) countChurn(q *request) {
	c, pol := q.route.churn, &q.route.policy
	if c == nil {
		return
	}
	scope := scopeHash(q.in, q.route.scope)
	if c.observe(churnIDOf(q.fp, scope), q.keyHash, q.start, pol.ChurnWindow, pol.ChurnMaxEntries) {
		q.route.metrics.churn.Inc()
		q.route.metrics.report.churned(q.start, scope)
	}
}

// adoptChurn keeps, across a reload, the fingerprints each route of old
// remembered, for the route of t with its label that still counts churn.
func (t *routeTable) adoptChurn(old *routeTable) {
	prev := map[string]*churn{}
	for _, rt := range old.all() {
		prev[rt.label] = rt.churn
	}
	for _, rt := range t.all() {
		if c := prev[rt.label]; c != nil && rt.churn != nil {
			rt.churn = c
		}
	}
}

// all is every route of t, the defaults' included.
func (t *routeTable) all() []*route {
	out := []*route{t.fallback}
	for _, rt := range t.byPattern {
		out = append(out, rt)
	}
	return out
}
