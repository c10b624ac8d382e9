package execution

import "sync"

// DetachBudget bounds the upstream calls detached from their clients, in
// count (MaxN) and in the bytes they may hold (MaxBytes).
type DetachBudget struct {
	MaxN, MaxBytes int64

	mu       sync.Mutex
	n, bytes int64
}

// Take reserves room for one call holding up to size bytes, and reports
// whether there was room.
func (b *DetachBudget) Take(size int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n >= b.MaxN || b.bytes+size > b.MaxBytes {
		return false
	}
	b.n++
	b.bytes += size
	return true
}

// Give returns the room Take reserved for a call of size bytes.
func (b *DetachBudget) Give(size int64) {
	b.mu.Lock()
	b.n--
	b.bytes -= size
	b.mu.Unlock()
}
