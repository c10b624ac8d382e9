package seal

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/store"
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

// A derived key seals at most epochRecords records; then a new nonce
// prefix is drawn, and records of either prefix open.
func TestEpochEndsAfterItsRecords(t *testing.T) {
	kr := mustParse(t, "k "+testKey(1))
	rec := response()
	first := kr.seal("a", rec)
	kr.keys[0].epoch.Load().sealed.Store(epochRecords)
	second := kr.seal("b", rec)
	if bytes.Equal(first.Sealed.Data[:12], second.Sealed.Data[:12]) {
		t.Fatal("the prefix outlived its epoch")
	}
	third := kr.seal("c", rec)
	if !bytes.Equal(second.Sealed.Data[:12], third.Sealed.Data[:12]) || bytes.Equal(second.Sealed.Data[12:24], third.Sealed.Data[12:24]) {
		t.Fatal("within an epoch, records share the prefix and differ in the GCM nonce")
	}
	fresh := mustParse(t, "k "+testKey(1)) // another process: derives both prefixes
	for key, r := range map[string]*store.Record{"a": first, "b": second, "c": third} {
		if _, err := fresh.open(key, r); err != nil {
			t.Errorf("open %s: %v", key, err)
		}
	}
}
