package postgres

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCheckNamesEachProblemsKey checks which keys Check names for each
// option, valid ones naming none, at each bound of each number.
func TestCheckNamesEachProblemsKey(t *testing.T) {
	const s = time.Second
	url := "postgres://proxy@db:5432/app"
	for _, c := range []struct {
		name string
		opts Options
		want []string
	}{
		{"a URL", Options{URL: url, Table: "t", Timeout: s, MaxConns: 1}, nil},
		{"no URL (libpq's environment)", Options{Table: "t", Timeout: s, MaxConns: 1}, nil},
		{"a postgresql URL", Options{URL: "postgresql://db/app", Table: "t", Timeout: s, MaxConns: 1}, nil},
		{"a URL that does not parse", Options{URL: "postgres://db:port/app", Table: "t", Timeout: s, MaxConns: 1}, []string{"url"}},
		{"another scheme", Options{URL: "mysql://db/app", Table: "t", Timeout: s, MaxConns: 1}, []string{"url"}},
		{"a schema-qualified table", Options{Table: "idem.keys", Timeout: s, MaxConns: 1}, nil},
		{"no table", Options{Timeout: s, MaxConns: 1}, []string{"table"}},
		{"a table of three parts", Options{Table: "a.b.c", Timeout: s, MaxConns: 1}, []string{"table"}},
		{"a quote in the table", Options{Table: `t"`, Timeout: s, MaxConns: 1}, []string{"table"}},
		{"no timeout", Options{Table: "t", MaxConns: 1}, []string{"timeout"}},
		{"a negative timeout", Options{Table: "t", Timeout: -1, MaxConns: 1}, []string{"timeout"}},
		{"the shortest timeout", Options{Table: "t", Timeout: 1, MaxConns: 1}, nil},
		{"no connection", Options{Table: "t", Timeout: s}, []string{"max_conns"}},
		{"a negative max_conns", Options{Table: "t", Timeout: s, MaxConns: -1}, []string{"max_conns"}},
		{"the cache off", Options{Table: "t", Timeout: s, MaxConns: 1, CacheBytes: 0}, nil},
		{"a one-byte cache", Options{Table: "t", Timeout: s, MaxConns: 1, CacheBytes: 1}, nil},
		{"a negative cache_bytes", Options{Table: "t", Timeout: s, MaxConns: 1, CacheBytes: -1}, []string{"cache_bytes"}},
		{"every problem", Options{URL: "http://db", Table: "a-b", Timeout: -1, MaxConns: -1, CacheBytes: -1},
			[]string{"url", "table", "timeout", "max_conns", "cache_bytes"}},
	} {
		var got []string
		for _, p := range c.opts.Check("store.postgres") {
			got = append(got, p.Key)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: Check names %q, want %q", c.name, got, c.want)
		}
	}
}

// TestCheckNeverQuotesTheURL: a URL's problem gives the reason, never the
// URL, which would echo its password.
func TestCheckNeverQuotesTheURL(t *testing.T) {
	for _, raw := range []string{"postgres://proxy:secret@db:port/app", "http://proxy:secret@db/app"} {
		probs := Options{URL: raw, Table: "t", Timeout: time.Second, MaxConns: 1}.Check("store.postgres")
		if len(probs) != 1 || probs[0].Key != "url" || probs[0].Reason == "" || strings.Contains(probs[0].Reason, "secret") {
			t.Errorf("Check of %s = %+v, want one url problem without the password", raw, probs)
		}
	}
}

// TestDefaultsFillOnlyWhatIsUnset checks Defaults: the default table,
// timeout, pool size and cache size where unset, and what is set kept.
func TestDefaultsFillOnlyWhatIsUnset(t *testing.T) {
	d := Options{}.Defaults().(Options)
	if d.Table != DefaultTable || d.Timeout != DefaultTimeout || d.MaxConns != DefaultMaxConns || d.CacheBytes != DefaultCacheBytes {
		t.Errorf("Defaults of nothing = %+v", d)
	}
	if probs := d.Check("store.postgres"); len(probs) != 0 {
		t.Errorf("Check of the defaults = %+v, want none", probs)
	}
	set := Options{Table: "idem.keys", Timeout: time.Second, MaxConns: 3, CacheBytes: 1 << 10}
	if d := set.Defaults().(Options); d != set {
		t.Errorf("Defaults of %+v = %+v, want it unchanged", set, d)
	}
}

// TestDescribeNeverShowsThePassword checks how the store is named.
func TestDescribeNeverShowsThePassword(t *testing.T) {
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{URL: "postgres://proxy:secret@db:5432/app", Table: "t"}, "postgres://proxy:xxxxx@db:5432/app table t"},
		{Options{URL: "postgres://db/app", Table: "idem.keys"}, "postgres://db/app table idem.keys"},
		{Options{URL: "postgres://proxy:secret@db:port/app", Table: "t"}, "postgres"},
	} {
		got := c.opts.Describe()
		if got != c.want || strings.Contains(got, "secret") {
			t.Errorf("Describe(%+v) = %q, want %q", c.opts, got, c.want)
		}
	}
}
