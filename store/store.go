// Package store keeps idempotency state: short leases on keys whose request is
// in flight, and the recorded responses of completed requests.
//
// Every implementation offers the same contract, proven by the conformance
// suite in store/storetest:
//
//   - Begin atomically either acquires a fresh lease on a key (returning a
//     random owner token) and stores the lease's description with it, or
//     reports what is already there: an in-flight lease with its
//     description, or a completed record.
//   - Extend, Complete and Release act only while the caller's token still
//     owns the key (fencing). A lease that expired and was taken by someone
//     else yields ErrLockLost; a newer owner is never overwritten.
//   - Complete with the same token and the same record a second time
//     succeeds (records encode deterministically), so a completion retried
//     after a lost reply is not mistaken for a lost lease.
//   - Complete keeps nothing of the record once it returns: the caller may
//     reuse its header and body (the proxy reuses header maps).
//   - For operators, Inspect and Delete act on one key (the storage key the
//     proxy passes to Begin), List pages through all of them, and Health
//     says whether the store may evict keys or is full. Deleting a lease
//     fences its owner like an expiry does.
//
// The package knows nothing of HTTP.
package store

import (
	"crypto/sha256"
	"errors"
	"strconv"
	"time"
)

// Sentinel errors. Implementations wrap them with %w; callers test with errors.Is.
var (
	// ErrUnavailable means the store could not be reached or did not answer
	// within its timeout. The outcome of a write is unknown.
	ErrUnavailable = errors.New("store unavailable")
	// ErrFull means the store has no room for a write: a new key (Begin) or
	// a record (Complete). A Complete refused this way leaves the caller's
	// lease in place, so the caller can keep it alive with Extend and try
	// again, or store a smaller record. It wraps ErrUnavailable so callers
	// that do not tell the two apart apply the same policy.
	ErrFull = full{}
	// ErrUnreplicated means a Complete wrote its record on the master but
	// fewer replicas than asked acknowledged it in time: the record is
	// there while that master is, and a failover before a replica has it
	// loses it. It wraps ErrUnavailable, so callers that do not tell the
	// two apart retry it alike.
	ErrUnreplicated = unreplicated{}
	// ErrRefused means the store answered and refused the write for a
	// reason that does not pass on its own: a constraint, a trigger, a
	// privilege, a read-only server. The same write is refused again. It
	// wraps ErrUnavailable, so callers that do not tell the two apart
	// retry it alike.
	ErrRefused = refused{}
	// ErrLockLost means the token no longer owns the key: its lease expired
	// and the key was released, completed or taken by another owner, or an
	// operator deleted it.
	ErrLockLost = errors.New("lock lost")
	// ErrNotFound means there is nothing under the key: no lease, no record.
	ErrNotFound = errors.New("key not found")
	// ErrInUse means another process holds a store that only one process
	// may open (the file store's directory): the store works, for that
	// process.
	ErrInUse = errors.New("in use by another process")

	// ErrUnreadable means a record is stored under the key that cannot be
	// read. The key may have been executed, so it must not be executed
	// again; it is one of the three errors below, which say why.
	ErrUnreadable = errors.New("record unreadable")
	// ErrCorrupt means stored bytes are not a valid encoded record: damaged,
	// or of a newer version's format.
	ErrCorrupt = unreadable("corrupt record")
	// ErrKeyUnknown means a record is sealed with a key the keyring does not
	// hold (removed, or encryption turned off).
	ErrKeyUnknown = unreadable("record sealed with a key not in the keyring")
	// ErrAuthFailed means a sealed record does not authenticate under its
	// key: its bytes were changed, or it was copied from another key.
	ErrAuthFailed = unreadable("sealed record does not authenticate")
)

// unreadable is a reason a record cannot be read; each is ErrUnreadable.
type unreadable string

func (e unreadable) Error() string      { return string(e) }
func (unreadable) Is(target error) bool { return target == ErrUnreadable }

// Reasons a record is unreadable, as metrics and the key API name them.
const (
	ReasonKeyUnknown = "key_unknown" // ErrKeyUnknown
	ReasonAuthFailed = "auth_failed" // ErrAuthFailed
	ReasonFormat     = "format"      // ErrCorrupt
)

// UnreadableReasons lists every reason UnreadableReason returns.
var UnreadableReasons = []string{ReasonKeyUnknown, ReasonAuthFailed, ReasonFormat}

// UnreadableReason names the reason of err, an error wrapping
// ErrUnreadable.
func UnreadableReason(err error) string {
	switch {
	case errors.Is(err, ErrKeyUnknown):
		return ReasonKeyUnknown
	case errors.Is(err, ErrAuthFailed):
		return ReasonAuthFailed
	}
	return ReasonFormat
}

// SealError is a sealed record that did not open: the id of the key it
// names, so logs can say which key is missing, and why (ErrKeyUnknown,
// ErrAuthFailed or ErrCorrupt). It never holds key material.
type SealError struct {
	KeyID string
	Err   error
}

func (e *SealError) Error() string {
	return "record sealed with key " + strconv.Quote(e.KeyID) + ": " + e.Err.Error()
}
func (e *SealError) Unwrap() error { return e.Err }

type full struct{}

func (full) Error() string        { return "store full" }
func (full) Is(target error) bool { return target == ErrUnavailable }

type unreplicated struct{}

func (unreplicated) Error() string {
	return "written on the master, not acknowledged by enough replicas"
}
func (unreplicated) Is(target error) bool { return target == ErrUnavailable }

type refused struct{}

func (refused) Error() string        { return "refused by the store" }
func (refused) Is(target error) bool { return target == ErrUnavailable }

// Fingerprint identifies a request's payload (a SHA-256 digest, computed by
// the caller). Two requests with one key but different fingerprints are a
// client error.
type Fingerprint [32]byte

// State is what Begin found.
type State uint8

const (
	// Acquired: the key was free; the caller now owns it and must Complete
	// or Release it with the returned token.
	Acquired State = iota + 1
	// InFlight: another owner holds an unexpired lease on the key.
	InFlight
	// Completed: a record is stored under the key.
	Completed
	// Expired: the key's record expired and a tombstone of it is kept
	// (Record.Tombstone); BeginResult.ExpiredAt says when. No lease is
	// taken.
	Expired
)

func (s State) String() string {
	switch s {
	case Acquired:
		return "acquired"
	case InFlight:
		return "in_flight"
	case Completed:
		return "completed"
	case Expired:
		return "expired"
	}
	return "unknown"
}

// BeginResult is what Store.Begin found.
type BeginResult struct {
	State State
	// Token is the owner token, set when State is Acquired.
	Token string
	// Fingerprint is the fingerprint of the request that owns the key (when
	// InFlight) or that produced the record (when Completed).
	Fingerprint Fingerprint
	// Record is set when State is Completed.
	Record *Record
	// Lease is the holder's lease, as its Begin described it, when State
	// is InFlight; its Fingerprint is Fingerprint.
	Lease Lease
	// ExpiredAt is when the key's record expired, set when State is
	// Expired.
	ExpiredAt time.Time
}

// Lease describes a lease on a key: the fingerprint of the request that
// holds it, that request as operators see it, and the proxy process
// running it. Begin stores it with the lease; Begin (for a key in flight),
// Inspect and List return it. Like Request, it never holds a query or a
// body.
type Lease struct {
	Fingerprint Fingerprint
	// Request is the request holding the key.
	Request Request
	// Instance names the proxy process that holds the lease
	// (docs/operating.md, "Instance").
	Instance string
	// TraceID is the trace of the request holding the key, in hex, when
	// tracing is on; "" otherwise.
	TraceID string
}

// Record is a recorded upstream response.
type Record struct {
	// Status is the HTTP status code.
	Status int
	// Header holds the response header fields in canonical form, repeated
	// values in order. Hop-by-hop fields are never recorded.
	Header map[string][]string
	// Body is the response body; empty when BodyOmitted.
	Body []byte
	// Trailer holds the response's trailer fields in canonical form (a
	// gRPC answer's grpc-status and grpc-message), nil when it had none.
	// A record with trailers is encoded as version 2 (record.go).
	Trailer map[string][]string
	// BodyOmitted is true when the body was too large to record.
	BodyOmitted bool
	// Fingerprint is the fingerprint of the request that produced it.
	Fingerprint Fingerprint
	// CreatedAt is when the recorded response began (its status arrived),
	// to the millisecond; Idempotency-Expires counts ttl from it.
	CreatedAt time.Time
	// Request is the request the record answered, for operators; zero in
	// records written before it was kept.
	Request Request
	// Lookup finds the record by its raw idempotency key without the
	// client's credentials; zero in records written before it was kept.
	Lookup Lookup
	// Tombstone, when > 0, asks the store to remember the key for this
	// long after the record expires: Begin then reports it Expired rather
	// than taking a lease (see Tombstones). It is not part of the record's
	// encoding.
	Tombstone time.Duration
	// Sealed, when set, holds the record's header and body encrypted
	// (package store/seal), and Header and Body are empty. A store keeps
	// and returns it as it does Header and Body, so with encryption on no
	// store holds a recorded header or body in clear.
	Sealed *Sealed
}

// Request describes the request a record answered: what an operator needs
// to tell what a key belongs to. Its query and body are never kept. It is a
// small section of its own in the encoding, readable without the key that
// seals the record's header and body.
type Request struct {
	Method string
	Host   string
	// Path is the request's path, without its query.
	Path string
	// Route is the matched route's pattern, or "default".
	Route string
	// StartedAt is when the proxy received the request, to the millisecond.
	StartedAt time.Time
}

// IsZero reports whether r describes nothing.
func (r Request) IsZero() bool {
	return r.Method == "" && r.Host == "" && r.Path == "" && r.Route == "" && r.StartedAt.IsZero()
}

// Lookup is what lets an operator find a record by the raw idempotency
// key alone (GET /admin/keys?key=, idempotency-proxy keys find), when the
// key_hash also hashes the client's scope values (an Authorization header
// the operator does not have). It is 32 bytes a record.
type Lookup struct {
	// Key is LookupKey of the raw idempotency key, unscoped.
	Key [16]byte
	// Scope is a hash of the scope values alone: records of one key with
	// the same Scope were sent by the same client.
	Scope [16]byte
}

// IsZero reports whether l holds nothing (a record written before
// lookups were kept).
func (l Lookup) IsZero() bool { return l == Lookup{} }

// LookupKey hashes a raw idempotency key for Lookup.Key: the key alone,
// under a label of its own so it is never the key_hash of any request.
func LookupKey(raw string) [16]byte {
	var buf [128]byte // a key of up to 100 bytes hashes without a heap allocation
	sum := sha256.Sum256(append(append(buf[:0], lookupLabel...), raw...))
	return [16]byte(sum[:16])
}

const lookupLabel = "idempotency-proxy lookup key\x00"

// Sealed is a record's header and body, encrypted with one key of the
// proxy's keyring. The other fields of its record stay readable: operators
// and eviction need the status, sizes and times without the key.
type Sealed struct {
	// KeyID names the keyring key that sealed it.
	KeyID string
	// BodyBytes is the size of the body in clear (0 when omitted).
	BodyBytes int
	// Data is the nonce, the ciphertext and its authentication tag.
	Data []byte
}

// BodyBytes is the size of rec's body in clear, sealed or not.
func (r *Record) BodyBytes() int {
	if r.Sealed != nil {
		return r.Sealed.BodyBytes
	}
	return len(r.Body)
}
