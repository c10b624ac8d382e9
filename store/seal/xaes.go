package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/subtle"
)

// Each record is sealed with AES-256-GCM under a key of its own, derived
// from the keyring key and the first half of a random 24-byte nonce; the
// second half is the GCM nonce. This is XAES-256-GCM (c2sp.org/XAES-256-GCM),
// built from the standard library's AES and GCM. A key used directly with
// random 12-byte nonces may seal about 2^32 records before a nonce repeats
// with a probability worth worrying about — at a thousand records a second,
// seven weeks — and a repeated GCM nonce gives away the authentication key.
// With a derived key per record the limit is out of reach, so rotation is a
// matter of policy, not of counting.
const (
	nonceSize = 24
	tagSize   = 16
	overhead  = nonceSize + tagSize
)

func newKey(id string, raw []byte) *key {
	block, err := aes.NewCipher(raw)
	if err != nil {
		panic("seal: " + err.Error()) // raw is KeySize bytes: cannot happen
	}
	k := &key{id: id, block: block}
	// k1 is the CMAC subkey of NIST SP 800-38B: L = AES(0), doubled in GF(2^128).
	block.Encrypt(k.k1[:], k.k1[:])
	var msb byte
	for i := len(k.k1) - 1; i >= 0; i-- {
		msb, k.k1[i] = k.k1[i]>>7, k.k1[i]<<1|msb
	}
	k.k1[len(k.k1)-1] ^= msb * 0b10000111
	return k
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
