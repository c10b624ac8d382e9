// Package lograte keeps a log line that would repeat on every request
// while a dependency is down (the store unreachable, its client redialling)
// to one a period: the first is written, those within the period after it
// are counted, and the first one after the period says how many were left
// out. A store outage then costs a few lines a minute, not one a request,
// and the request-by-request record stays in the access log (its outcome
// and key_hash).
package lograte

import (
	"sync"
	"time"
)

// Period is how often a repeated line is written: often enough that an
// operator tailing the log sees the outage go on.
const Period = 10 * time.Second

// Limiter lets one line through a period. Its zero value is not usable:
// use New. It is safe for concurrent use.
type Limiter struct {
	period time.Duration

	mu         sync.Mutex
	next       time.Time // no line before this
	suppressed int       // lines left out since the last one written
}

// New returns a Limiter letting one line through every period.
func New(period time.Duration) *Limiter { return &Limiter{period: period} }

// Allow reports whether the line due at now is to be written, and if so
// how many were left out before it (the log line's "suppressed").
func (l *Limiter) Allow(now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Before(l.next) {
		l.suppressed++
		return false, 0
	}
	l.next = now.Add(l.period)
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}
