package postgres

import (
	"fmt"
	"log/slog"
	"net/url"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

var _ store.Options = Options{}

// Defaults returns o with the default table, timeout, pool size and cache
// size where unset.
func (o Options) Defaults() store.Options {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxConns == 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = DefaultCacheBytes
	}
	return o
}

// Check validates the options without contacting the database. A URL's
// problem never quotes the URL: it would echo the password.
func (o Options) Check(string) []store.Problem {
	var out []store.Problem
	add := func(key, format string, args ...any) {
		out = append(out, store.Problem{Key: key, Reason: fmt.Sprintf(format, args...)})
	}
	if o.URL != "" {
		if _, err := parseURL(o.URL); err != nil {
			add("url", "%v", err)
		}
	}
	if !tableName.MatchString(o.Table) {
		add("table", "invalid table name %q (want a name, or schema.name, of letters, digits and _)", o.Table)
	}
	if o.Timeout <= 0 {
		add("timeout", "must be > 0, not %s", o.Timeout)
	}
	if o.MaxConns < 1 {
		add("max_conns", "must be >= 1, not %d", o.MaxConns)
	}
	if o.CacheBytes < 0 {
		add("cache_bytes", "must be >= 0 (0 turns the cache off), not %d", o.CacheBytes)
	}
	return out
}

// Open builds the pool (New); it does not contact the database. The proxy
// then calls Prepare, which creates the table.
func (o Options) Open(log *slog.Logger) (store.Store, error) {
	o.Logger = log
	return New(o)
}

// Describe is the URL with its password masked, and the table.
func (o Options) Describe() string {
	u, err := url.Parse(o.URL)
	if err != nil {
		return "postgres"
	}
	return u.Redacted() + " table " + o.Table
}
