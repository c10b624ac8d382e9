package execution

import (
	"testing"
	"time"
)

// The alarm's lock_ttl and the renewal rule are one fact: a lease of
// MinLockTTL(d), renewed every RenewEvery of it, has at least d left when
// an outage begins, and a lease a millisecond shorter has not.
func TestMinLockTTLIsWhatTheRenewalsLeave(t *testing.T) {
	for _, d := range []time.Duration{time.Second, 2 * time.Second, 10 * time.Second, 90 * time.Second} {
		ttl := MinLockTTL(d)
		if left := ttl - RenewEvery(ttl); left < d {
			t.Errorf("MinLockTTL(%v) = %v leaves %v after a renewal's interval, less than %v", d, ttl, left, d)
		}
		shorter := ttl - time.Millisecond
		if left := shorter - RenewEvery(shorter); left >= d {
			t.Errorf("lock_ttl %v, below MinLockTTL(%v) = %v, leaves %v: MinLockTTL is not the shortest", shorter, d, ttl, left)
		}
	}
}
