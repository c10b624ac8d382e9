package proxy

import (
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

// churnID is a fingerprint and scope, hashed (churnIdentity): never the
// body itself.
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
	// memo is the scope_hash of the scope that churned last, by a seeded
	// hash of its values: a client that churns tends to churn on, and a
	// SHA-256 of its scope on each of its requests cost more than the
	// rest of the count.
	memo struct {
		sync.Mutex
		key   uint64
		scope [16]byte
		set   bool
	}
}

// scopeHash is q.scopeHash, remembered for the scope whose values hash to
// key (two scopes share a key about once in 2^64).
func (c *churn) scopeHash(key uint64, q *request) [16]byte {
	c.memo.Lock()
	defer c.memo.Unlock()
	if !c.memo.set || c.memo.key != key {
		c.memo.key, c.memo.scope, c.memo.set = key, q.scopeHash(), true
	}
	return c.memo.scope
}

func newChurn() *churn {
	return &churn{seed: maphash.MakeSeed(), cur: map[churnID]churnSeen{}}
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

// noteChurn notes whether id, q's fingerprint under its scope values
// (churnIdentity), was sent under another key within churn_window, and
// remembers it under q's key; scopeKey is the seeded hash of q's scope
// values. fingerprintAndKey calls it, on a route that counts churn, under
// both modes and before the store is asked; countChurn counts it.
func (h *Handler) noteChurn(q *request, id churnID, scopeKey uint64) {
	pol := &q.route.policy
	q.churned = q.route.churn.observe(id, q.keyHash, q.start, pol.ChurnWindow, pol.ChurnMaxEntries)
	q.churnScope = scopeKey
}

// countChurn counts q in idempotency_proxy_key_churn_total when noteChurn
// found its fingerprint and scope under another key. serveKeyed calls it
// unless the store knows q's key: a key the store holds is a retry of its
// own, whatever keys the same request went out under in between, and
// never churn. A store that could not answer does not hide churn.
func (h *Handler) countChurn(q *request) {
	if !q.churned {
		return
	}
	q.churned = false // once, whichever way the key was decided
	q.route.metrics.churn.Inc()
	q.route.metrics.report.churned(q.start, q.route.churn.scopeHash(q.churnScope, q))
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
