package seal

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// The derivation is XAES-256-GCM's: the test vectors of c2sp.org/XAES-256-GCM.
func TestRecordKeyDerivationIsXAES256GCM(t *testing.T) {
	tests := []struct {
		key        byte
		aad        string
		ciphertext string
	}{
		{0x01, "", "ce546ef63c9cc60765923609b33a9a1974e96e52daf2fcf7075e2271"},
		{0x03, "c2sp.org/XAES-256-GCM", "986ec1832593df5443a179437fd083bf3fdb41abd740a21f71eb769d"},
	}
	nonce := []byte("ABCDEFGHIJKLMNOPQRSTUVWX")
	for _, tc := range tests {
		k := newKey("k", bytes.Repeat([]byte{tc.key}, KeySize))
		got := k.aead(nonce).Seal(nil, nonce[12:], []byte("XAES-256-GCM"), []byte(tc.aad))
		if hex.EncodeToString(got) != tc.ciphertext {
			t.Errorf("key %#x: sealed %x, want %s", tc.key, got, tc.ciphertext)
		}
	}
}
