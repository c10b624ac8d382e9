package proxy

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"net/http"
	"sync"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// hasher is a reusable SHA-256 with a scratch buffer for the small parts of
// a request, so hashing allocates nothing.
type hasher struct {
	h   hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

var hashers = sync.Pool{New: func() any { return &hasher{h: sha256.New(), buf: make([]byte, 0, 512)} }}

func getHasher() *hasher {
	hs := hashers.Get().(*hasher)
	hs.h.Reset()
	hs.buf = hs.buf[:0]
	return hs
}

func (hs *hasher) field(s string) {
	hs.length(len(s))
	hs.buf = append(hs.buf, s...)
}

func (hs *hasher) length(n int) {
	hs.buf = binary.BigEndian.AppendUint64(hs.buf, uint64(n))
}

// finish hashes the buffered parts followed by tail and returns the pooled
// hasher; the digest is in the returned array.
func (hs *hasher) finish(tail []byte) [sha256.Size]byte {
	hs.h.Write(hs.buf)
	hs.h.Write(tail)
	hs.h.Sum(hs.sum[:0])
	sum := hs.sum
	if cap(hs.buf) <= 64<<10 { // do not pool a buffer a huge header grew
		hashers.Put(hs)
	}
	return sum
}

// fingerprint is the SHA-256 of the parts of a request that must be equal
// for a retry to be the same operation: method, path, query, the configured
// headers and the body. Every part is length-prefixed so that no two
// different requests hash the same bytes.
func fingerprint(r *http.Request, body []byte, headers []string) store.Fingerprint {
	hs := getHasher()
	hs.field(r.Method)
	hs.field(r.URL.EscapedPath())
	hs.field(r.URL.RawQuery)
	for _, name := range headers {
		hs.field(name)
		values := r.Header[name]
		hs.length(len(values))
		for _, v := range values {
			hs.field(v)
		}
	}
	hs.length(len(body))
	return hs.finish(body)
}

// storageKey names a key in the store: a hash of the scope header values and
// the idempotency key, so one client can never be replayed another's
// response and neither Authorization values nor raw keys are stored.
func storageKey(r *http.Request, key string, scope []string) string {
	hs := getHasher()
	for _, name := range scope {
		values := r.Header[name]
		hs.length(len(values))
		for _, v := range values {
			hs.field(v)
		}
	}
	hs.field(key)
	sum := hs.finish(nil)
	// 128 bits: collisions are out of reach, and the key stays short in Redis.
	return hex.EncodeToString(sum[:16])
}
