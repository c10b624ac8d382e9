package e2e

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// proxyConfig is what a test sets in a proxy's YAML file; listeners are
// filled in by startProxy. Zero fields keep the built-in defaults.
type proxyConfig struct {
	Upstream        string
	UpstreamTimeout time.Duration
	MaxExecution    time.Duration
	ShutdownTimeout time.Duration
	// UpstreamProtocol is upstream.protocol ("" leaves the default).
	UpstreamProtocol string

	// Memory selects the memory store, PostgresURL the Postgres store,
	// FilePath the file store in that directory (with FileFsync);
	// otherwise exactly one of RedisURL or RedisAddrs (with MasterName for
	// Sentinel).
	Memory       bool
	PostgresURL  string
	FilePath     string
	FileFsync    bool
	RedisURL     string
	RedisAddrs   []string
	MasterName   string
	RedisTimeout time.Duration
	ReplicaAck   int // store.redis.replica_ack
	// ReplicaAckTimeout is store.redis.replica_ack_timeout.
	ReplicaAckTimeout time.Duration

	// Defaults are raw YAML values under defaults:, e.g. "lock_ttl": "2s".
	Defaults map[string]string
	Routes   []routeConfig
	// Extra is YAML appended at the top level as it is, such as a
	// routes: list read from the documentation; Routes must then be empty.
	Extra string
	// Env is added to the process's environment.
	Env []string
}

// routeConfig is one entry of routes:, its keys as raw YAML values.
type routeConfig struct {
	Match string
	Keys  map[string]string
}

// yaml renders the config file for the given listener addresses.
func (c proxyConfig) yaml(listen, admin string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %q\nadmin_listen: %q\nlog_level: info\n", listen, admin)
	if c.ShutdownTimeout > 0 {
		fmt.Fprintf(&b, "shutdown_timeout: %s\n", c.ShutdownTimeout)
	}
	fmt.Fprintf(&b, "upstream:\n  url: %q\n", c.Upstream)
	if c.UpstreamTimeout > 0 {
		fmt.Fprintf(&b, "  timeout: %s\n", c.UpstreamTimeout)
	}
	if c.MaxExecution > 0 {
		fmt.Fprintf(&b, "  max_execution: %s\n", c.MaxExecution)
	}
	if c.UpstreamProtocol != "" {
		fmt.Fprintf(&b, "  protocol: %s\n", c.UpstreamProtocol)
	}
	switch {
	case c.Memory:
		b.WriteString("store:\n  kind: memory\n")
	case c.PostgresURL != "":
		fmt.Fprintf(&b, "store:\n  kind: postgres\n  postgres:\n    url: %q\n", c.PostgresURL)
	case c.FilePath != "":
		fmt.Fprintf(&b, "store:\n  kind: file\n  file:\n    path: %q\n    fsync: %v\n", c.FilePath, c.FileFsync)
	default:
		b.WriteString("store:\n  kind: redis\n  redis:\n")
	}
	if c.RedisURL != "" {
		fmt.Fprintf(&b, "    url: %q\n", c.RedisURL)
	}
	if len(c.RedisAddrs) > 0 {
		fmt.Fprintf(&b, "    addrs: [%s]\n", quoteList(c.RedisAddrs))
	}
	if c.MasterName != "" {
		fmt.Fprintf(&b, "    master_name: %q\n", c.MasterName)
	}
	if c.RedisTimeout > 0 {
		fmt.Fprintf(&b, "    timeout: %s\n", c.RedisTimeout)
	}
	if c.ReplicaAck > 0 {
		fmt.Fprintf(&b, "    replica_ack: %d\n", c.ReplicaAck)
	}
	if c.ReplicaAckTimeout > 0 {
		fmt.Fprintf(&b, "    replica_ack_timeout: %s\n", c.ReplicaAckTimeout)
	}
	if len(c.Defaults) > 0 {
		b.WriteString("defaults:\n")
		writeKeys(&b, "  ", c.Defaults)
	}
	if len(c.Routes) > 0 {
		b.WriteString("routes:\n")
		for _, r := range c.Routes {
			fmt.Fprintf(&b, "  - match: %q\n", r.Match)
			writeKeys(&b, "    ", r.Keys)
		}
	}
	b.WriteString(c.Extra)
	return b.String()
}

func writeKeys(b *strings.Builder, indent string, keys map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		fmt.Fprintf(b, "%s%s: %s\n", indent, k, keys[k])
	}
}

func quoteList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}
