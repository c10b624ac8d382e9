package execution

import "time"

// Clock is the time source of leases, deadlines and background settling:
// real time in production (RealClock); tests drive a fake one, so that
// none sleeps for a lease to run out.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
	// After sends on the returned channel once d has passed.
	After(d time.Duration) <-chan time.Time
}

// Timer is the part of *time.Timer a lease and a deadline use.
type Timer interface {
	Reset(d time.Duration) bool
	Stop() bool
}

// RealClock is the Clock of real time.
type RealClock struct{}

func (RealClock) Now() time.Time                            { return time.Now() }
func (RealClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
func (RealClock) After(d time.Duration) <-chan time.Time    { return time.After(d) }
