package store

import (
	"context"
	"log/slog"
	"time"
)

// Options is a store kind's configuration, implemented by the Options type
// of each store package. That type is the schema of its section of the
// configuration (store.KIND): its fields' `config` tags are the keys, a
// `flag` tag names the flag that sets a key, and an `address` tag marks
// the keys that say where the store is (a URL, addresses, a directory).
// Setting an address selects the kind when store.kind is not set, and a kind
// with address keys needs one of them set. A kind is added to the
// configuration by one field of config.Store (docs/architecture.md, "Adding
// a store").
type Options interface {
	// Defaults returns the options with every default set: what the
	// configuration shows and starts from.
	Defaults() Options
	// Check returns every reason the options cannot open a store. section
	// is the dotted path of the options ("store.redis"): a reason that
	// names another key names it in full.
	Check(section string) []Problem
	// Open builds the store. It need not reach the server: the proxy starts
	// either way, and Ping tells when the store answers.
	Open(log *slog.Logger) (Store, error)
	// Describe names the store for logs and --check, never with its
	// credentials: "redis://:xxxxx@db:6379/0", "memory".
	Describe() string
}

// Problem is one reason a store's options cannot work, located by its key
// within the store's section ("url", "addrs[1]").
type Problem struct {
	Key    string
	Reason string
}

// Store is what every kind offers once open: the key's lifecycle, which the
// proxy uses, readiness's Ping, the operator's view, and Close. The
// conformance suite (store/storetest) holds every kind to it.
type Store interface {
	Lifecycle
	Ping(ctx context.Context) error
	Operator
	Close() error
}

// Lifecycle is a key's life on the request path: Begin takes a lease (or
// finds one, or the record), Extend renews it, Complete stores the record,
// Release gives the key up; the last three only for the lease's token
// (docs/architecture.md, "The store contract"). The proxy consumes a store
// through it.
type Lifecycle interface {
	Begin(ctx context.Context, key string, l Lease, ttl time.Duration) (BeginResult, error)
	Extend(ctx context.Context, key, token string, lease time.Duration) error
	Complete(ctx context.Context, key, token string, rec *Record, ttl time.Duration) error
	Release(ctx context.Context, key, token string) error
}

// Operator is the operator's view of a store, which the admin key API
// serves: one key's entry, its deletion, a page of entries, the server's
// health.
type Operator interface {
	Inspect(ctx context.Context, key string) (Entry, error)
	Delete(ctx context.Context, key string) error
	List(ctx context.Context, state State, cursor string, limit int) ([]Entry, string, error)
	Health(ctx context.Context) (Health, error)
}

// Preparer is a store that sets itself up in its server at start (the
// Postgres store creates its table). The proxy calls Prepare before it
// serves, and --check never does. An error wrapping ErrUnavailable (the
// server does not answer) lets the proxy start, unready until the store
// answers and prepares itself; any other error stops the start.
type Preparer interface {
	Prepare(ctx context.Context) error
}

// Stats are the size figures of a store that keeps them in the process
// (the memory store) or can read them cheaply (the file store), for its
// gauges and eviction counter.
type Stats struct {
	// Bytes is the approximate size of the entries held: keys, leases'
	// descriptions, recorded headers and bodies.
	Bytes int64
	// Records is the number of completed records held, expired ones
	// included until they are reclaimed.
	Records int64
	// Evictions counts the completed records dropped to make room
	// (when_full: evict_oldest) since the start.
	Evictions uint64
}

// StatsReporter is a store that keeps Stats.
type StatsReporter interface {
	Stats() Stats
}
