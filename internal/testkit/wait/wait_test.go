package wait

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Eventually returns once the condition holds, and otherwise the bound and
// the condition's last error, so a failed wait says what it last saw.
func TestEventuallyGivesTheLastError(t *testing.T) {
	tries := 0
	SucceedsSoon(t, time.Minute, func() error {
		if tries++; tries < 3 {
			return fmt.Errorf("try %d", tries)
		}
		return nil
	})
	if tries != 3 {
		t.Fatalf("cond called %d times, want 3", tries)
	}
	tries = 0
	err := SoonError(50*time.Millisecond, func() error { tries++; return fmt.Errorf("try %d", tries) })
	if err == nil || !strings.Contains(err.Error(), "not within 50ms") || !strings.Contains(err.Error(), fmt.Sprintf("(last: try %d)", tries)) {
		t.Fatalf("err = %v, want the bound and the last try (%d)", err, tries)
	}
}

// Throughout keeps asking for the whole bound while the condition holds,
// and stops at its first error, which it returns.
func TestThroughoutStopsAtTheFirstError(t *testing.T) {
	tries := 0
	if err := Throughout(30*time.Millisecond, func() error { tries++; return nil }); err != nil || tries < 2 {
		t.Fatalf("Throughout = %v after %d tries, want nil after several", err, tries)
	}
	tries = 0
	err := Throughout(time.Minute, func() error {
		if tries++; tries == 3 {
			return fmt.Errorf("broke at %d", tries)
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "broke at 3") || tries != 3 {
		t.Fatalf("Throughout = %v after %d tries, want the third try's error at once", err, tries)
	}
}
