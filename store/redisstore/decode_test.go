package redisstore

import (
	"errors"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// TestEntryExpiresWhenPTTLSays checks the expiry the key API shows: none
// for a key without one (PTTL -1), now for a key in its last millisecond
// (PTTL 0), and PTTL from now otherwise; and that an empty value is
// corrupt, not read past its end.
func TestEntryExpiresWhenPTTLSays(t *testing.T) {
	lease := []byte{kindLease}
	lease = append(lease, make([]byte, leaseFixed-1)...)
	before := time.Now().Truncate(time.Millisecond)
	for _, c := range []struct {
		ttl       time.Duration
		wantNever bool
		wantAfter time.Duration
	}{
		{-1, true, 0},
		{0, false, 0},
		{time.Minute, false, time.Minute},
	} {
		e, err := decodeEntry("k", lease, c.ttl, true)
		if err != nil {
			t.Fatalf("decodeEntry of a lease: %v", err)
		}
		switch {
		case c.wantNever && !e.ExpiresAt.IsZero():
			t.Errorf("PTTL %v: expires at %v, want never", c.ttl, e.ExpiresAt)
		case !c.wantNever && (e.ExpiresAt.Before(before.Add(c.wantAfter)) || e.ExpiresAt.After(time.Now().Add(c.wantAfter))):
			t.Errorf("PTTL %v: expires at %v, want %v from now", c.ttl, e.ExpiresAt, c.wantAfter)
		}
	}
	for _, v := range [][]byte{nil, {}} {
		if _, err := decodeEntry("k", v, -1, true); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("decodeEntry of an empty value: %v, want ErrCorrupt", err)
		}
	}
}
