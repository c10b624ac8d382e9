package proxy

import (
	"crypto/sha256"
	"encoding"
	"hash/maphash"
	"math/rand/v2"
	"sync/atomic"
)

// A fingerprint starts with the parts that rarely change from one request of
// a route to the next: method, host, path, query and the fingerprint
// headers, typically more than one SHA-256 block (64 bytes); the method,
// host, path and the first header name often fill the first block. prefixStates
// keeps the hash's state after such a first block together with the block
// itself, so that a request whose first 64 bytes of input are the same bytes
// starts from that state instead of hashing them again. The digest is the
// same SHA-256 of the same input either way: a state is used only for a
// byte-for-byte equal block, so nothing about collisions changes.
//
// The table is small and shared by every handler of the process (the state
// depends on nothing but the block). A slot is replaced by a new block one
// time in prefixReplaceOdds, so that a stream of one-off prefixes (a path
// parameter within the first 64 bytes) neither allocates on every request
// nor keeps a busy route's block out for long.
var prefixStates [prefixSlots]atomic.Pointer[prefixState]

const (
	prefixSlots       = 64
	prefixReplaceOdds = 16
)

type prefixState struct {
	block [sha256.BlockSize]byte
	state []byte // the digest after hashing block, as its AppendBinary writes it
}

var prefixSeed = maphash.MakeSeed()

// binaryState is what crypto/sha256's digest implements to save and restore
// its state.
type binaryState interface {
	encoding.BinaryAppender
	encoding.BinaryUnmarshaler
}

// writePrefixed writes in to the freshly reset hs.h, starting from a kept
// state when in's first block has one. open is where in's first byte that
// may carry a secret starts (a query, a header value, the body): a block
// holding one is neither kept nor looked up, so the table holds methods,
// hosts, paths and header names only.
func (hs *hasher) writePrefixed(in []byte, open int) {
	st, ok := hs.h.(binaryState)
	if !ok || len(in) < sha256.BlockSize || open < sha256.BlockSize {
		hs.h.Write(in)
		return
	}
	block := (*[sha256.BlockSize]byte)(in)
	slot := &prefixStates[maphash.Bytes(prefixSeed, block[:])%prefixSlots]
	if p := slot.Load(); p != nil && p.block == *block && st.UnmarshalBinary(p.state) == nil {
		hs.h.Write(in[sha256.BlockSize:])
		return
	}
	hs.h.Write(block[:])
	if slot.Load() == nil || rand.N(prefixReplaceOdds) == 0 {
		if state, err := st.AppendBinary(nil); err == nil {
			slot.Store(&prefixState{block: *block, state: state})
		}
	}
	hs.h.Write(in[sha256.BlockSize:])
}
