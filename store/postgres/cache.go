package postgres

import (
	"sync"
	"time"
)

// cache holds completed records this replica read, so that a replay —
// Begin on a completed key, a sidecar's commonest store call — is
// answered without a statement. It never answers with a record that was
// deleted or has expired, on any replica (replica.go has the protocol):
//
//   - It serves only while its registration's lease is live by a local
//     deadline (setDeadline): the time the renewal that proved the lease
//     was sent, plus the lease, minus a margin. The database ends the
//     lease later than that, so a DELETE elsewhere, which waits for every
//     live registration to acknowledge it, stops waiting for this one only
//     once this one has stopped serving.
//   - Every deletion of a completed record is logged in the transaction
//     that deletes it; the poller drops the logged keys (invalidate)
//     before it acknowledges them.
//   - A record read from the database is added only if nothing was
//     invalidated since the read was sent (fill): a deletion applied in
//     between would otherwise be undone.
//   - An entry ends at the read's send time plus the record's remaining
//     time as the database computed it, minus a margin, and at most
//     cacheMaxAge after the read: never by the local clock against the
//     database's timestamps.
//
// It is bounded: records larger than cacheMaxRecord are not kept, and
// past its byte bound an arbitrary entry makes room.
type cache struct {
	maxBytes int64

	mu       sync.Mutex
	version  uint64    // invalidations and resets applied so far
	deadline time.Time // end of serving; zero while not registered
	m        map[string]cached
	bytes    int64
}

// cached is one completed record as Begin's statement returned it.
type cached struct {
	fingerprint, head, body []byte
	expires                 time.Time // local, monotonic
}

const (
	// DefaultCacheBytes bounds the records the cache holds when
	// Options.CacheBytes is not set.
	DefaultCacheBytes = 4 << 20
	// cacheMaxRecord is the largest record (key, head and body) kept.
	cacheMaxRecord = 64 << 10
	// cacheMaxAge bounds how long an entry is served after its read, so
	// that the two clocks' rates never matter more than cacheExpiryMargin.
	cacheMaxAge = time.Minute
	// cacheExpiryMargin is taken off a record's remaining time.
	cacheExpiryMargin = 100 * time.Millisecond
	// cacheEntryOverhead is what an entry costs beyond its bytes.
	cacheEntryOverhead = 64
)

func newCache(maxBytes int64) *cache {
	return &cache{maxBytes: maxBytes, m: make(map[string]cached)}
}

func (e *cached) size(key string) int64 {
	return int64(len(key)+len(e.fingerprint)+len(e.head)+len(e.body)) + cacheEntryOverhead
}

// get returns key's record if the cache may serve it at now.
func (c *cache) get(key string, now time.Time) (cached, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !now.Before(c.deadline) {
		return cached{}, false
	}
	e, ok := c.m[key]
	if !ok {
		return cached{}, false
	}
	if !now.Before(e.expires) {
		c.drop(key)
		return cached{}, false
	}
	return e, true
}

// readVersion is what fill compares, read before a statement is sent;
// ok is false while the cache is not registered: nothing is filled then.
func (c *cache) readVersion() (v uint64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.version, !c.deadline.IsZero()
}

// fill adds key's record e, read by a statement sent after readVersion
// returned v, unless an invalidation or a reset was applied since.
func (c *cache) fill(key string, e cached, v uint64) {
	if e.size(key) > cacheMaxRecord || !time.Now().Before(e.expires) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.version != v {
		return
	}
	c.drop(key)
	size := e.size(key)
	for k := range c.m {
		if c.bytes+size <= c.maxBytes {
			break
		}
		c.drop(k)
	}
	if c.bytes+size > c.maxBytes {
		return
	}
	c.m[key] = e
	c.bytes += size
}

// invalidate drops keys, whose records were deleted.
func (c *cache) invalidate(keys ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.version++
	for _, k := range keys {
		c.drop(k)
	}
}

// setDeadline lets the cache serve until d: a renewal of its live
// registration, sent at d minus the lease plus the margin, succeeded.
func (c *cache) setDeadline(d time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline = d
}

// reset empties the cache and makes it serve until deadline (zero: not at
// all), for a registration that is new, lost or withdrawn: what was held
// may have been deleted without this replica being waited for.
func (c *cache) reset(deadline time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.version++
	clear(c.m)
	c.bytes = 0
	c.deadline = deadline
}

func (c *cache) drop(key string) {
	if e, ok := c.m[key]; ok {
		c.bytes -= e.size(key)
		delete(c.m, key)
	}
}
