package memory

import (
	"fmt"
	"log/slog"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

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
func (o Options) Check(string) []store.Problem {
	if o.MaxBytes <= 0 {
		return []store.Problem{{Key: "max_bytes", Reason: fmt.Sprintf("must be > 0, not %d", o.MaxBytes)}}
	}
	return nil
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
