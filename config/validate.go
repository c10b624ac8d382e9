package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Validate checks the semantic rules (ranges, words, combinations, route
// patterns) of a decoded Config. Load calls it; call it yourself for a
// Config built in code. It returns errors.Join of *Problem values.
func (c *Config) Validate() error {
	ps := c.problems()
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = p
	}
	return errors.Join(errs...)
}

// checker collects problems under a path prefix.
type checker struct {
	prefix string
	out    []*Problem
}

func (k *checker) add(key, format string, args ...any) {
	k.out = append(k.out, &Problem{Path: join(k.prefix, key), Reason: fmt.Sprintf(format, args...)})
}

func (c *Config) problems() []*Problem {
	k := &checker{}
	checkAddr(k, "listen", c.Listen)
	checkAddr(k, "admin_listen", c.AdminListen)
	if c.Listen == c.AdminListen && !strings.HasSuffix(c.Listen, ":0") {
		k.add("admin_listen", "same address as listen (%s)", c.Listen)
	}
	if c.ShutdownTimeout <= 0 {
		k.add("shutdown_timeout", "must be > 0, not %s", c.ShutdownTimeout)
	}
	checkUpstream(k, c.Upstream)
	checkStore(k, c.Store)
	if c.Admin.Token != "" && c.Admin.TokenFile != "" {
		k.add("admin.token_file", "set admin.token or admin.token_file, not both")
	}

	defaults := &checker{prefix: "defaults"}
	checkPolicy(defaults, c.Defaults)
	k.out = append(k.out, defaults.out...)
	inherited := map[string]bool{}
	for _, p := range defaults.out {
		inherited[strings.TrimPrefix(p.Error(), "defaults.")] = true
	}
	for i, r := range c.Routes {
		rk := &checker{prefix: fmt.Sprintf("routes[%d]", i)}
		checkPolicy(rk, r.Policy)
		for _, p := range rk.out {
			// A mistake inherited from defaults is reported once, there.
			if !inherited[strings.TrimPrefix(p.Error(), rk.prefix+".")] {
				k.out = append(k.out, p)
			}
		}
	}
	k.out = append(k.out, checkPatterns(c.Routes)...)
	return k.out
}

func checkAddr(k *checker, key, addr string) {
	if addr == "" {
		k.add(key, "required (host:port, e.g. :8080)")
		return
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		k.add(key, "invalid address %q (want host:port, e.g. :8080)", addr)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		k.add(key, "invalid port %q", port)
	}
}

func checkUpstream(k *checker, u Upstream) {
	switch {
	case u.URL == nil:
		k.add("upstream.url", "required (e.g. http://127.0.0.1:3000)")
	case u.URL.Scheme != "http" && u.URL.Scheme != "https":
		k.add("upstream.url", "scheme must be http or https, not %q", u.URL.Scheme)
	case u.URL.Host == "":
		k.add("upstream.url", "missing host in %q", u.URL.Redacted())
	}
	if u.Timeout <= 0 {
		k.add("upstream.timeout", "must be > 0, not %s", u.Timeout)
	}
}

func checkStore(k *checker, s Store) {
	r := s.Redis
	switch s.kind() {
	case StoreMemory:
	case StoreRedis:
		if r.URL == "" && len(r.Addrs) == 0 {
			k.add("store.kind", "redis needs store.redis.url or store.redis.addrs")
		}
	default:
		k.add("store.kind", "must be one of memory, redis")
	}
	if s.Memory.MaxBytes <= 0 {
		k.add("store.memory.max_bytes", "must be > 0, not %s", s.Memory.MaxBytes)
	}
	if w := s.Memory.WhenFull; w != WhenFullReject && w != WhenFullEvictOldest {
		k.add("store.memory.when_full", "must be one of %s, %s, not %q", WhenFullReject, WhenFullEvictOldest, w)
	}
	if r.URL != "" {
		u, err := url.Parse(r.URL)
		switch {
		case err != nil:
			// The error text would echo the URL, password included.
			k.add("store.redis.url", "invalid URL")
		case u.Scheme != "redis" && u.Scheme != "rediss":
			k.add("store.redis.url", "scheme must be redis or rediss, not %q", u.Scheme)
		case u.Host == "":
			k.add("store.redis.url", "missing host")
		}
		if len(r.Addrs) > 0 {
			k.add("store.redis.addrs", "set either store.redis.url or store.redis.addrs, not both")
		}
	}
	for i, a := range r.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			k.add(fmt.Sprintf("store.redis.addrs[%d]", i), "invalid address %q (want host:port)", a)
		}
	}
	if r.MasterName != "" && len(r.Addrs) == 0 {
		k.add("store.redis.master_name", "needs store.redis.addrs (the Sentinel addresses)")
	}
	if strings.ContainsAny(r.KeyPrefix, "{}") {
		// Braces would defeat the hash tag that keeps one key's entries in
		// one Cluster slot.
		k.add("store.redis.key_prefix", "must not contain { or }")
	}
	if r.Timeout <= 0 {
		k.add("store.redis.timeout", "must be > 0, not %s", r.Timeout)
	}
}

func checkPolicy(k *checker, p Policy) {
	if !validToken(p.Header) {
		k.add("header", "invalid header name %q", p.Header)
	}
	for i, m := range p.Methods {
		if !validToken(m) {
			k.add(fmt.Sprintf("methods[%d]", i), "invalid method %q", m)
		}
	}
	if p.TTL <= 0 {
		k.add("ttl", "must be > 0, not %s", p.TTL)
	}
	if p.LockTTL <= 0 {
		k.add("lock_ttl", "must be > 0, not %s", p.LockTTL)
	} else if p.TTL > 0 && p.LockTTL > p.TTL {
		k.add("lock_ttl", "%s exceeds ttl %s", p.LockTTL, p.TTL)
	}
	oneOf(k, "concurrent", p.Concurrent, ConcurrentReject, ConcurrentWait)
	switch {
	case p.WaitTimeout < 0:
		k.add("wait_timeout", "must not be negative (%s)", p.WaitTimeout)
	case p.WaitTimeout == 0 && p.Concurrent == ConcurrentWait:
		k.add("wait_timeout", "must be > 0 when concurrent is wait")
	}
	oneOf(k, "on_store_error", p.OnStoreError, FailClosed, FailOpen)
	oneOf(k, "on_upstream_error", p.OnUpstreamError, UpstreamErrorRelease, UpstreamErrorKeep)
	for i, s := range p.ReleaseStatuses {
		if s < 100 || s > 599 {
			k.add(fmt.Sprintf("release_statuses[%d]", i), "invalid HTTP status %d (want 100..599)", s)
		}
	}
	if p.MaxRequestBody <= 0 {
		k.add("max_request_body", "must be > 0, not %s", p.MaxRequestBody)
	}
	if p.MaxResponseBody < 0 {
		k.add("max_response_body", "must not be negative")
	}
	lists := []struct {
		key   string
		names []string
	}{
		{"scope_headers", p.ScopeHeaders},
		{"fingerprint_headers", p.FingerprintHeaders},
		{"replay_exclude_headers", p.ReplayExcludeHeaders},
	}
	for _, l := range lists {
		for i, h := range l.names {
			if !validToken(h) {
				k.add(fmt.Sprintf("%s[%d]", l.key, i), "invalid header name %q", h)
			}
		}
	}
}

func oneOf(k *checker, key, got string, words ...string) {
	if !slices.Contains(words, got) {
		k.add(key, "must be one of %s", strings.Join(words, ", "))
	}
}
