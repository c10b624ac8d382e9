package memory

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// entryOverhead approximates an entry's slot (104 bytes) and its share of
// the index, so that many tiny entries still count against MaxBytes.
const entryOverhead = 128

// entry is a lease or a completed record. Its key and its encoding — the
// lease's description (store.AppendLease) or the record
// (store.AppendRecord) — lie in its table's slabs, at off. A record keeps
// the token of the lease it replaced, so that a completion retried by that
// owner is recognised.
type entry struct {
	token   [tokenLen / 2]byte // the token's random bits, not its hex
	fp      store.Fingerprint
	expires int64  // Unix nanoseconds
	seq     uint64 // completion order, for EvictOldest
	slab    int32
	off     uint32
	keyLen  uint32
	encLen  uint32
	record  bool // a completed record, not a lease
}

// size is what e counts against MaxBytes.
func (e *entry) size() int64 { return int64(e.keyLen) + int64(e.encLen) + entryOverhead }

// ownedBy reports whether token is the token of e's lease.
func (e *entry) ownedBy(token string) bool {
	var h [tokenLen]byte
	hex.Encode(h[:], e.token[:])
	return string(h[:]) == token
}

// tokenLen is the length of a token: 128 random bits, hex-encoded.
const tokenLen = 32

// tokenBatch is how many tokens a shard draws at once: one read of the
// random source and one string for 32 tokens, in place of one each a miss.
const tokenBatch = 32

// tokens hands out a shard's lease tokens. Its shard's mutex guards it.
type tokens struct {
	raw  [tokenBatch * tokenLen / 2]byte
	hex  string // raw, hex-encoded
	next int    // the index of the next token
}

// take returns 128 random bits, and their hex encoding: the token. The
// token is a substring of the batch's, which it keeps alive while it is
// held; the others in it are as random, and no less secret.
func (t *tokens) take() (raw [tokenLen / 2]byte, token string) {
	if t.hex == "" || t.next == tokenBatch {
		_, _ = rand.Read(t.raw[:]) // crypto/rand.Read never fails (Go 1.24+)
		t.hex, t.next = hex.EncodeToString(t.raw[:]), 0
	}
	i := t.next
	t.next++
	copy(raw[:], t.raw[i*tokenLen/2:])
	return raw, t.hex[i*tokenLen : (i+1)*tokenLen]
}
