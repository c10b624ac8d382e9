package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/subtle"
	"sync/atomic"
)

// Each record is sealed with AES-256-GCM under a key of its own, derived
// from the keyring key and the first half of a 24-byte nonce; the second
// half is the GCM nonce. This is XAES-256-GCM (c2sp.org/XAES-256-GCM),
// built from the standard library's AES and GCM. A key used directly with
// random 12-byte nonces may seal about 2^32 records before a nonce repeats
// with a probability worth worrying about — at a thousand records a second,
// seven weeks — and a repeated GCM nonce gives away the authentication key.
//
// Deriving a GCM key costs more than sealing a small record, so the first
// half of the nonce is random per epoch, not per record: a process seals
// up to epochRecords records under one derived key, each with its own
// random 12-byte GCM nonce (far from the limit above), then draws a new
// prefix. Opening keeps the derived keys of the prefixes it has met, a
// handful per process that wrote records. The record's whole 24-byte nonce
// is unique, and the format is plain XAES-256-GCM.
const (
	nonceSize = 24
	tagSize   = 16
	overhead  = nonceSize + tagSize

	// epochRecords is how many records one derived key seals.
	epochRecords = 1 << 24
	// maxDerived bounds the derived keys kept for opening, per key.
	maxDerived = 4096
)

func newKey(id string, raw []byte) *key {
	block, err := aes.NewCipher(raw)
	if err != nil {
		panic("seal: " + err.Error()) // raw is KeySize bytes: cannot happen
	}
	k := &key{id: id, block: block, derived: map[[12]byte]cipher.AEAD{}}
	// k1 is the CMAC subkey of NIST SP 800-38B: L = AES(0), doubled in GF(2^128).
	block.Encrypt(k.k1[:], k.k1[:])
	var msb byte
	for i := len(k.k1) - 1; i >= 0; i-- {
		msb, k.k1[i] = k.k1[i]>>7, k.k1[i]<<1|msb
	}
	k.k1[len(k.k1)-1] ^= msb * 0b10000111
	return k
}

// epoch is a nonce prefix and the key it derives, sealing until it has
// sealed epochRecords records.
type epoch struct {
	prefix [12]byte
	aead   cipher.AEAD
	sealed atomic.Uint64
}

// sealer fills nonce with the current epoch's prefix and a random GCM
// nonce, and returns the record key.
func (k *key) sealer(nonce []byte) cipher.AEAD {
	e := k.epoch.Load()
	if e == nil || e.sealed.Add(1) > epochRecords {
		e = &epoch{}
		rand.Read(e.prefix[:])
		e.aead = k.aead(e.prefix[:])
		e.sealed.Store(1)
		k.epoch.Store(e)
	}
	copy(nonce, e.prefix[:])
	rand.Read(nonce[12:nonceSize])
	return e.aead
}

// opener returns the record key of nonce, derived once per prefix.
func (k *key) opener(nonce []byte) cipher.AEAD {
	prefix := [12]byte(nonce[:12])
	k.mu.RLock()
	g, ok := k.derived[prefix]
	k.mu.RUnlock()
	if ok {
		return g
	}
	g = k.aead(nonce)
	k.mu.Lock()
	if len(k.derived) < maxDerived {
		k.derived[prefix] = g
	}
	k.mu.Unlock()
	return g
}

// aead returns AES-256-GCM under the record key that the first 12 bytes of
// nonce derive; the caller passes nonce[12:] to it.
func (k *key) aead(nonce []byte) cipher.AEAD {
	var kx [32]byte
	kx[0], kx[1], kx[2], kx[3] = 0, 1, 'X', 0
	copy(kx[4:16], nonce[:12])
	kx[16], kx[17], kx[18], kx[19] = 0, 2, 'X', 0
	copy(kx[20:32], nonce[:12])
	subtle.XORBytes(kx[:16], kx[:16], k.k1[:])
	subtle.XORBytes(kx[16:], kx[16:], k.k1[:])
	k.block.Encrypt(kx[:16], kx[:16])
	k.block.Encrypt(kx[16:], kx[16:])
	block, err := aes.NewCipher(kx[:])
	clear(kx[:])
	if err != nil {
		panic("seal: " + err.Error())
	}
	g, err := cipher.NewGCM(block)
	if err != nil {
		panic("seal: " + err.Error())
	}
	return g
}
