package config

import (
	"fmt"
	"slices"
	"strings"
)

// fields is the schema of the file: every key, where it is decoded to, and
// in which order. The list of keys accepted from the environment and from
// flags is derived from it, so the three can never disagree.
func (c *Config) fields() []field {
	r := &c.Store.Redis
	return []field{
		{name: "listen", decode: str(&c.Listen)},
		{name: "admin_listen", decode: str(&c.AdminListen)},
		{name: "log_level", decode: logLevel(c)},
		{name: "shutdown_timeout", decode: duration(&c.ShutdownTimeout)},
		{name: "upstream", group: []field{
			{name: "url", decode: urlValue(&c.Upstream.URL)},
			{name: "timeout", decode: duration(&c.Upstream.Timeout)},
		}},
		{name: "store", group: []field{
			{name: "kind", decode: str(&c.Store.Kind)},
			{name: "memory", group: []field{
				{name: "max_bytes", decode: size(&c.Store.Memory.MaxBytes)},
				{name: "when_full", decode: str(&c.Store.Memory.WhenFull)},
			}},
			{name: "redis", group: []field{
				{name: "url", decode: str(&r.URL)},
				{name: "addrs", decode: strs(&r.Addrs)},
				{name: "master_name", decode: str(&r.MasterName)},
				{name: "key_prefix", decode: str(&r.KeyPrefix)},
				{name: "timeout", decode: duration(&r.Timeout)},
			}},
		}},
		{name: "admin", group: []field{
			{name: "token", decode: str(&c.Admin.Token)},
			{name: "token_file", decode: str(&c.Admin.TokenFile)},
			{name: "pprof", decode: boolean(&c.Admin.PProf)},
		}},
		{name: "tracing", group: []field{
			{name: "enabled", decode: boolean(&c.Tracing.Enabled)},
		}},
		// defaults before routes: a route starts from the decoded defaults.
		{name: "defaults", group: policyFields(&c.Defaults)},
		{name: "routes", decode: c.decodeRoutes},
	}
}

func policyFields(p *Policy) []field {
	return []field{
		{name: "header", decode: header(&p.Header)},
		{name: "methods", decode: methods(&p.Methods)},
		{name: "require_key", decode: boolean(&p.RequireKey)},
		{name: "ttl", decode: duration(&p.TTL)},
		{name: "lock_ttl", decode: duration(&p.LockTTL)},
		{name: "concurrent", decode: str(&p.Concurrent)},
		{name: "wait_timeout", decode: duration(&p.WaitTimeout)},
		{name: "on_store_error", decode: str(&p.OnStoreError)},
		{name: "on_upstream_error", decode: str(&p.OnUpstreamError)},
		{name: "release_statuses", decode: statuses(&p.ReleaseStatuses)},
		{name: "max_request_body", decode: size(&p.MaxRequestBody)},
		{name: "max_response_body", decode: size(&p.MaxResponseBody)},
		{name: "scope_headers", decode: headers(&p.ScopeHeaders)},
		{name: "fingerprint_headers", decode: headers(&p.FingerprintHeaders)},
		{name: "replay_exclude_headers", decode: headers(&p.ReplayExcludeHeaders)},
	}
}

func routeFields(r *Route) []field {
	return append([]field{
		{name: "match", decode: str(&r.Match)},
		{name: "enabled", decode: boolean(&r.Enabled)},
	}, policyFields(&r.Policy)...)
}

// decodeRoutes decodes the routes list; each route starts as a copy of the
// (already decoded) defaults, so whatever it does not set is inherited and a
// list it sets replaces the inherited one.
func (c *Config) decodeRoutes(d *decoder, path string, raw any) {
	if s, ok := raw.(sourced); ok {
		parsed, err := parseRoutesDocument(s.value)
		if err != nil {
			d.add(path, raw, "invalid YAML or JSON list: %v", err)
			return
		}
		raw = parsed
	}
	items, ok := raw.([]any)
	if !ok {
		d.add(path, raw, "must be a list, not %s", describe(raw))
		return
	}
	c.Routes = make([]Route, 0, len(items))
	for i, item := range items {
		r := Route{Enabled: true, Policy: c.Defaults.clone()}
		d.mapping(fmt.Sprintf("%s[%d]", path, i), item, routeFields(&r))
		c.Routes = append(c.Routes, r)
	}
}

// Keys returns every dotted key that can be set from the environment or a
// flag, in file order ("listen", ..., "upstream.url", ..., "routes").
func Keys() []string {
	var keys []string
	var walk func(prefix string, fs []field)
	walk = func(prefix string, fs []field) {
		for _, f := range fs {
			if f.group != nil {
				walk(join(prefix, f.name), f.group)
				continue
			}
			keys = append(keys, join(prefix, f.name))
		}
	}
	walk("", Default().fields())
	return keys
}

// EnvPrefix starts every environment variable the configuration reads.
const EnvPrefix = "IDEMPOTENCY_PROXY_"

// EnvConfigFile names the configuration file when Source.File is empty.
const EnvConfigFile = EnvPrefix + "CONFIG"

// EnvVar returns the environment variable of a dotted key:
// "defaults.lock_ttl" → IDEMPOTENCY_PROXY_DEFAULTS_LOCK_TTL.
func EnvVar(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// envKeys maps each variable name back to its key. Going from the known keys
// to names (never splitting a name on "_") keeps keys that contain
// underscores unambiguous.
func envKeys() map[string]string {
	out := map[string]string{}
	for _, k := range Keys() {
		out[EnvVar(k)] = k
	}
	return out
}

func isKey(key string) bool { return slices.Contains(Keys(), key) }
