package memory

import (
	"log/slog"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// Options configure a Store. The zero value is an unbounded store on the
// wall clock.
type Options struct {
	// MaxBytes bounds the approximate memory used by entries; 0 means no
	// bound. See the package documentation for the behaviour when full.
	// The configuration requires a bound (DefaultMaxBytes unless set).
	MaxBytes int64 `config:"max_bytes,size"`
	// WhenFull is what a write that would exceed MaxBytes does; the zero
	// value is store.Reject.
	WhenFull store.WhenFull `config:"when_full"`
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

// Check requires a bound (store.CheckBound).
func (o Options) Check(string) []store.Problem { return store.CheckBound(o.MaxBytes, o.WhenFull) }

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
