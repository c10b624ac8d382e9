package config

import (
	"net/url"
	"slices"
)

// RestartNeeded lists the dotted keys whose new value (in c) differs from
// old and cannot take effect without a restart: the listeners are bound, the
// store is connected, the reverse proxy and its transport, the admin handler
// and the tracer are built once. A reload applies everything else (routes,
// policies, log level, the admin token); the caller logs these keys and keeps
// running with the old listeners and store.
func (c *Config) RestartNeeded(old *Config) []string {
	if old == nil {
		return nil
	}
	r, o := c.Store.Redis, old.Store.Redis
	changes := []struct {
		key     string
		changed bool
	}{
		{"listen", c.Listen != old.Listen},
		{"admin_listen", c.AdminListen != old.AdminListen},
		{"upstream.url", urlString(c.Upstream.URL) != urlString(old.Upstream.URL)},
		{"upstream.timeout", c.Upstream.Timeout != old.Upstream.Timeout},
		{"store.kind", c.Store.kind() != old.Store.kind()},
		{"store.memory.max_bytes", c.Store.Memory.MaxBytes != old.Store.Memory.MaxBytes},
		{"store.memory.when_full", c.Store.Memory.WhenFull != old.Store.Memory.WhenFull},
		{"store.redis.url", r.URL != o.URL},
		{"store.redis.addrs", !slices.Equal(r.Addrs, o.Addrs)},
		{"store.redis.master_name", r.MasterName != o.MasterName},
		{"store.redis.key_prefix", r.KeyPrefix != o.KeyPrefix},
		{"store.redis.timeout", r.Timeout != o.Timeout},
		{"admin.pprof", c.Admin.PProf != old.Admin.PProf},
		{"tracing.enabled", c.Tracing.Enabled != old.Tracing.Enabled},
	}
	var keys []string
	for _, ch := range changes {
		if ch.changed {
			keys = append(keys, ch.key)
		}
	}
	return keys
}

func urlString(u *url.URL) string {
	if u == nil {
		return ""
	}
	return u.String()
}
