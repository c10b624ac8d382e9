package store

import (
	"fmt"

	"github.com/idempotency-proxy/idempotency-proxy/internal/enum"
)

// The bound on the data a store holds in its own process or files (the
// memory and file stores): max_bytes and what a write that does not fit
// does. The stores that keep one share this policy, its words and its checks.

// WhenFull selects what a full store does with a write that does not fit.
type WhenFull uint8

const (
	// Reject refuses the write with ErrFull.
	Reject WhenFull = iota
	// EvictOldest drops the oldest completed records until the write fits;
	// leases are never dropped.
	EvictOldest
)

var whenFullWords = enum.Words{"reject", "evict_oldest"}

func (w WhenFull) String() string { return whenFullWords.Name(int(w)) }

// MarshalText gives the configuration's word.
func (w WhenFull) MarshalText() ([]byte, error) { return []byte(w.String()), nil }

// UnmarshalText parses the configuration's words, "reject" and "evict_oldest".
func (w *WhenFull) UnmarshalText(b []byte) error {
	i, err := whenFullWords.Parse(string(b))
	if err != nil {
		return err
	}
	*w = WhenFull(i)
	return nil
}

// CheckBound reports a max_bytes that is no bound and a when_full built in
// code that has no word: a bounded store's Options.Check. An unbounded
// store in a proxy's process grows until the kernel kills it, which forgets
// every key at once.
func CheckBound(maxBytes int64, whenFull WhenFull) []Problem {
	var out []Problem
	if maxBytes <= 0 {
		out = append(out, Problem{Key: "max_bytes", Reason: fmt.Sprintf("must be > 0, not %d", maxBytes)})
	}
	if err := whenFullWords.Check(int(whenFull)); err != nil {
		out = append(out, Problem{Key: "when_full", Reason: err.Error()})
	}
	return out
}

// Lists reports whether List, asked for entries in state s, lists an entry
// that holds a record (record true) or a lease: InFlight lists leases,
// Completed records, any other state both.
func (s State) Lists(record bool) bool {
	switch s {
	case InFlight:
		return !record
	case Completed:
		return record
	}
	return true
}
