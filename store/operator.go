package store

import "time"

// Entry is one key as an operator sees it: a lease on a request in flight,
// or a completed record.
type Entry struct {
	// Key is the storage key as the proxy names it (its key_hash), without
	// any prefix the store adds.
	Key string
	// State is InFlight or Completed.
	State State
	// ExpiresAt is when the store forgets the key: the end of the lease, or
	// of the record's TTL.
	ExpiresAt time.Time
	// Fingerprint is the fingerprint of the request that owns the key or
	// produced the record.
	Fingerprint Fingerprint
	// Lease is the holder's lease, as its Begin described it, when State
	// is InFlight.
	Lease Lease
	// Record is the recorded response when State is Completed. Listings may
	// leave its Body nil; BodyBytes always gives the recorded body's size.
	Record *Record
	// BodyBytes is the size of the recorded body (0 when omitted).
	BodyBytes int
	// SealedBy is the id of the encryption key that sealed the record, ""
	// for a record in clear (set by package store/seal).
	SealedBy string
	// Unreadable is why a sealed record could not be opened (a
	// *SealError); Record then has its readable fields only. For an
	// entry whose stored bytes do not decode at all (UnreadableEntry) it
	// wraps ErrCorrupt, and Record is nil.
	Unreadable error
}

// UnreadableEntry is what a listing shows of key, whose stored bytes do
// not decode (err wraps ErrCorrupt): a record of a newer version's format,
// or damaged bytes. The proxy takes such a key for executed, so the entry
// is a record, in flight only when the store knows it holds a lease, with
// no readable field but its expiry (zero when unknown); the listing goes on
// past it, so that one such entry never hides the others.
func UnreadableEntry(key string, inFlight bool, expiresAt time.Time, err error) Entry {
	state := Completed
	if inFlight {
		state = InFlight
	}
	return Entry{Key: key, State: state, ExpiresAt: expiresAt, Unreadable: err}
}

// Health is what a store reports of itself, for readiness checks and
// --check. A store that answers but is in a dangerous state says so here
// rather than failing the check.
type Health struct {
	// Server names the store and its version: "memory", "redis 7.0.15".
	Server string
	// EvictionPolicy is Redis' maxmemory-policy ("" for the memory store,
	// "unknown" when the server would not say).
	EvictionPolicy string
	// EvictionUnsafe is true when the store may evict the proxy's keys on
	// its own: an evicted lease or record means a second execution.
	EvictionUnsafe bool
	// Full is true when the store is refusing writes for lack of space.
	Full bool
	// Detail is anything else worth a line in --check ("table
	// idempotency_keys exists"); "" when nothing.
	Detail string
	// Forgot describes each loss of the store's data noticed by this
	// check (and not by an earlier one): a Redis restarted without
	// persistence, flushed, or failed over to a replica without the data.
	// Every lease and record it held is gone.
	Forgot []string
	// FailoverTime is how long the store may be without a master during a
	// failover (Sentinel: down-after-milliseconds plus the election); 0
	// when the store does not fail over or would not say. A lease must
	// outlive it, or its key may execute twice.
	FailoverTime time.Duration
}
