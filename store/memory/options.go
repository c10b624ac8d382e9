package memory

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/enum"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// WhenFull selects what a full store does with a write that does not fit.
type WhenFull uint8

const (
	// Reject refuses the write with store.ErrFull.
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

// Options configure a Store. The zero value is an unbounded store on the
// wall clock.
type Options struct {
	// MaxBytes bounds the approximate memory used by entries; 0 means no
	// bound. See the package documentation for the behaviour when full.
	// The configuration requires a bound (DefaultMaxBytes unless set).
	MaxBytes int64 `config:"max_bytes,size"`
	// WhenFull is what a write that would exceed MaxBytes does; the zero
	// value is Reject.
	WhenFull WhenFull `config:"when_full"`
	// Now is the clock; nil means time.Now. Tests inject a fake clock.
	Now func() time.Time
	// SweepInterval is the pause between visits of the expiry sweeper to
	// one shard; 0 means 50ms, a negative value disables the sweeper.
	SweepInterval time.Duration
}

// DefaultMaxBytes is the configuration's bound on the recorded data.
const DefaultMaxBytes = 256 << 20

var _ store.Options = Options{}

// Defaults returns o with the configuration's bound when it has none.
func (o Options) Defaults() store.Options {
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	return o
}

// Check requires a bound: an unbounded store in a proxy's process grows
// until the kernel kills it, which forgets every key at once.
func (o Options) Check(string) []store.Problem { return CheckBound(o.MaxBytes, o.WhenFull) }

// CheckBound reports a max_bytes that is no bound and a when_full built in
// code that has no word. The file store, which is full by the memory
// store's rules, checks its own max_bytes and when_full with it.
func CheckBound(maxBytes int64, whenFull WhenFull) []store.Problem {
	var out []store.Problem
	if maxBytes <= 0 {
		out = append(out, store.Problem{Key: "max_bytes", Reason: fmt.Sprintf("must be > 0, not %d", maxBytes)})
	}
	if err := whenFullWords.Check(int(whenFull)); err != nil {
		out = append(out, store.Problem{Key: "when_full", Reason: err.Error()})
	}
	return out
}

// Open returns a new store and says, at info level, that it forgets
// everything when the process exits: a proxy killed and restarted executes
// every retried key again (docs/guarantees.md, "What survives what").
func (o Options) Open(log *slog.Logger) (store.Store, error) {
	log.Info("store is in memory: every lease and record is forgotten when the process exits or restarts; use redis, postgres or file to keep them",
		"store", "memory", "max_bytes", o.MaxBytes, "when_full", o.WhenFull.String())
	return New(o), nil
}

// Describe is "memory".
func (Options) Describe() string { return "memory" }
