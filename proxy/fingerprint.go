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

var hashPool = sync.Pool{New: func() any { return sha256.New() }}

// fingerprint is the SHA-256 of the parts of a request that must be equal
// for a retry to be the same operation: method, path, query, the configured
// headers and the body. Every part is length-prefixed so that no two
// different requests hash the same bytes.
func fingerprint(r *http.Request, body []byte, headers []string) store.Fingerprint {
	h := hashPool.Get().(hash.Hash)
	h.Reset()
	writeField(h, r.Method)
	writeField(h, r.URL.EscapedPath())
	writeField(h, r.URL.RawQuery)
	for _, name := range headers {
		writeField(h, name)
		values := r.Header[name]
		writeLen(h, len(values))
		for _, v := range values {
			writeField(h, v)
		}
	}
	writeLen(h, len(body))
	h.Write(body)
	var fp store.Fingerprint
	h.Sum(fp[:0])
	hashPool.Put(h)
	return fp
}

// storageKey names a key in the store: a hash of the scope header values and
// the idempotency key, so one client can never be replayed another's
// response and neither Authorization values nor raw keys are stored.
func storageKey(r *http.Request, key string, scope []string) string {
	h := hashPool.Get().(hash.Hash)
	h.Reset()
	for _, name := range scope {
		values := r.Header[name]
		writeLen(h, len(values))
		for _, v := range values {
			writeField(h, v)
		}
	}
	writeField(h, key)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	hashPool.Put(h)
	// 128 bits: collisions are out of reach, and the key stays short in Redis.
	return hex.EncodeToString(sum[:16])
}

func writeField(h hash.Hash, s string) {
	writeLen(h, len(s))
	h.Write([]byte(s))
}

func writeLen(h hash.Hash, n int) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	h.Write(b[:])
}
