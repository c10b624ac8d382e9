package filestore

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// The database's buckets.
var (
	// bucketKeys maps a storage key to its entry.
	bucketKeys = []byte("keys")
	// bucketExpiry indexes every entry by the time it was last indexed
	// under (8 bytes big-endian Unix nanoseconds, then the key), so the
	// sweeper and eviction walk entries in order of expiry. A lease whose
	// renewal moved its expiry later keeps its old index entry until the
	// sweeper reaches it and moves it (see entry.indexed).
	bucketExpiry = []byte("expiry")
	// bucketMeta holds the size counters, kept in the same transactions as
	// the entries they count so a restart reads them instead of counting.
	bucketMeta = []byte("meta")
)

var metaKey = []byte("size")

const (
	kindLease  = 1
	kindRecord = 2

	// tokenLen is the length of a token: 128 random bits, hex-encoded.
	tokenLen = 32
	// headerLen is the fixed part of an encoded entry.
	headerLen = 1 + tokenLen + len(store.Fingerprint{}) + 8 + 8
	// entryOverhead approximates what an entry costs beyond its key and
	// record: its fixed header, its index entry and bbolt's per-element
	// headers, so that many tiny entries still count against MaxBytes.
	entryOverhead = 128
)

// entry is a lease (kind lease) or a completed record. A record keeps the
// token of the lease it replaced, so that a completion retried by that
// owner is recognised.
//
// Encoded layout: kind (1 byte), token (32), fingerprint (32), expires
// (8, big-endian Unix nanoseconds), indexed (8, the time of its index
// entry, never after expires), then the encoded record (store.AppendRecord)
// or the lease's description (store.AppendLease; none in a lease written
// before leases were described).
type entry struct {
	kind    byte
	token   [tokenLen]byte
	fp      store.Fingerprint
	expires int64
	indexed int64
	enc     []byte
}

func (e *entry) isRecord() bool { return e.kind == kindRecord }

func (e *entry) ownedBy(token string) bool { return string(e.token[:]) == token }

// size is what an entry of key costs against MaxBytes: the key twice (the
// entry and its index entry), the record and the overhead.
func entrySize(key string, encLen int) int64 {
	return int64(2*len(key)+encLen) + entryOverhead
}

func (e *entry) size(key string) int64 { return entrySize(key, len(e.enc)) }

func (e *entry) marshal() []byte {
	b := make([]byte, headerLen, headerLen+len(e.enc))
	b[0] = e.kind
	copy(b[1:], e.token[:])
	copy(b[1+tokenLen:], e.fp[:])
	binary.BigEndian.PutUint64(b[1+tokenLen+32:], uint64(e.expires))
	binary.BigEndian.PutUint64(b[1+tokenLen+40:], uint64(e.indexed))
	return append(b, e.enc...)
}

// errCorrupt is an entry whose bytes do not decode: a flipped bit or a torn
// page. It may be the record of a key that was executed, so it is an
// unreadable record (store.ErrCorrupt), which the proxy never executes
// again, and it stays until an operator deletes it.
var errCorrupt = fmt.Errorf("corrupt entry: %w", store.ErrCorrupt)

// unmarshal decodes b. The entry's enc aliases b: within a transaction b
// is the database's memory map, so a caller keeping enc past the
// transaction copies it (see copyEnc).
func unmarshal(b []byte) (entry, error) {
	if len(b) < headerLen || (b[0] != kindLease && b[0] != kindRecord) {
		return entry{}, fmt.Errorf("file store: %w", errCorrupt)
	}
	var e entry
	e.kind = b[0]
	copy(e.token[:], b[1:])
	copy(e.fp[:], b[1+tokenLen:])
	e.expires = int64(binary.BigEndian.Uint64(b[1+tokenLen+32:]))
	e.indexed = int64(binary.BigEndian.Uint64(b[1+tokenLen+40:]))
	e.enc = b[headerLen:]
	return e, nil
}

// copyEnc detaches e's record or lease description from the
// transaction's memory.
func (e *entry) copyEnc() { e.enc = append([]byte(nil), e.enc...) }

// indexKey is the expiry index's key for key indexed at t.
func indexKey(t int64, key string) []byte {
	b := make([]byte, 8, 8+len(key))
	binary.BigEndian.PutUint64(b, uint64(t))
	return append(b, key...)
}

func parseIndexKey(b []byte) (int64, []byte) {
	return int64(binary.BigEndian.Uint64(b)), b[8:]
}

// meta is the size counters.
type meta struct {
	used, records int64
}

func readMeta(b *bolt.Bucket) meta {
	v := b.Get(metaKey)
	if len(v) != 16 {
		return meta{}
	}
	return meta{int64(binary.BigEndian.Uint64(v)), int64(binary.BigEndian.Uint64(v[8:]))}
}

func writeMeta(b *bolt.Bucket, m meta) error {
	var v [16]byte
	binary.BigEndian.PutUint64(v[:], uint64(m.used))
	binary.BigEndian.PutUint64(v[8:], uint64(m.records))
	return b.Put(metaKey, v[:])
}

// decodeLease decodes the description of a lease on fp.
func decodeLease(enc []byte, fp store.Fingerprint) (store.Lease, error) {
	l, err := store.DecodeLease(enc, fp)
	if err != nil {
		return store.Lease{}, fmt.Errorf("file store: %w", err)
	}
	return l, nil
}

// decode decodes a record's encoding; its body aliases enc.
func decode(enc []byte) (*store.Record, error) {
	rec, err := store.DecodeRecord(enc)
	if err != nil {
		return nil, fmt.Errorf("file store: %w", err)
	}
	return rec, nil
}
