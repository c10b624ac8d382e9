package filestore

import (
	"log/slog"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

var _ store.Options = Options{}

// Defaults returns o with the configuration's bound when it has none.
func (o Options) Defaults() store.Options {
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	return o
}

// Check requires a positive bound. The directory is not looked at: the
// configuration is checked without touching the store.
func (o Options) Check(string) []store.Problem { return store.CheckBound(o.MaxBytes, o.WhenFull) }

// Open opens the directory, failing when another process holds it, and
// logs what survives what with these options.
func (o Options) Open(log *slog.Logger) (store.Store, error) {
	s, err := Open(o)
	if err != nil {
		return nil, err
	}
	survives := "a process kill, not a power loss (fsync: false)"
	if o.Fsync {
		survives = "a process kill and a power loss (fsync: true)"
	}
	log.Info("store is a directory: every acknowledged lease and record survives "+survives,
		"store", "file", "path", o.Path, "fsync", o.Fsync, "max_bytes", s.maxBytes,
		"when_full", o.WhenFull.String(), "records", s.records.Load(), "bytes", s.used.Load())
	return s, nil
}

// Describe is "file" and the directory.
func (o Options) Describe() string { return "file " + o.Path }
