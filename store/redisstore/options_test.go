package redisstore

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCheckNamesEachProblemsKey checks which keys Check names for each
// deployment the options may describe, valid ones naming none, at each
// bound of each number.
func TestCheckNamesEachProblemsKey(t *testing.T) {
	const s = time.Second
	// Check reads options after Defaults: a zero replica_ack_timeout there
	// was set so, and is refused rather than read as the default.
	const ack = DefaultReplicaAckTimeout
	url := "redis://db:6379/0"
	for _, c := range []struct {
		name string
		opts Options
		want []string
	}{
		{"a URL", Options{ReplicaAckTimeout: ack, URL: url, Timeout: s}, nil},
		{"a TLS URL", Options{ReplicaAckTimeout: ack, URL: "rediss://db:6379/0", Timeout: s}, nil},
		{"a URL that does not parse", Options{ReplicaAckTimeout: ack, URL: "redis://db:port", Timeout: s}, []string{"url"}},
		{"another scheme", Options{ReplicaAckTimeout: ack, URL: "http://db:6379", Timeout: s}, []string{"url"}},
		{"no host", Options{ReplicaAckTimeout: ack, URL: "redis:///0", Timeout: s}, []string{"url"}},
		{"a URL and addresses", Options{ReplicaAckTimeout: ack, URL: url, Addrs: []string{"db:6379"}, Timeout: s}, []string{"addrs"}},
		{"a Cluster", Options{ReplicaAckTimeout: ack, Addrs: []string{"a:1", "b:2"}, Timeout: s}, nil},
		{"an address without a port", Options{ReplicaAckTimeout: ack, Addrs: []string{"a:1", "b"}, Timeout: s}, []string{"addrs[1]"}},
		{"Sentinel", Options{ReplicaAckTimeout: ack, Addrs: []string{"a:26379"}, MasterName: "m", Timeout: s}, nil},
		{"a master name without sentinels", Options{ReplicaAckTimeout: ack, MasterName: "m", Timeout: s}, []string{"master_name"}},
		{"a brace in the prefix", Options{ReplicaAckTimeout: ack, URL: url, KeyPrefix: "a{", Timeout: s}, []string{"key_prefix"}},
		{"no timeout", Options{ReplicaAckTimeout: ack, URL: url}, []string{"timeout"}},
		{"a negative timeout", Options{ReplicaAckTimeout: ack, URL: url, Timeout: -1}, []string{"timeout"}},
		{"a negative replica_ack", Options{ReplicaAckTimeout: ack, URL: url, Timeout: s, ReplicaAck: -1}, []string{"replica_ack"}},
		{"a zero replica_ack_timeout", Options{URL: url, Timeout: s}, []string{"replica_ack_timeout"}},
		{"a zero replica_ack_timeout, replicas awaited", Options{URL: url, Timeout: s, ReplicaAck: 1}, []string{"replica_ack_timeout"}},
		{"a negative replica_ack_timeout", Options{URL: url, Timeout: s, ReplicaAckTimeout: -1}, []string{"replica_ack_timeout"}},
		{"a wait as long as the timeout", Options{URL: url, Timeout: s, ReplicaAck: 1, ReplicaAckTimeout: s}, []string{"replica_ack_timeout"}},
		{"a wait shorter than the timeout", Options{URL: url, Timeout: s, ReplicaAck: 1, ReplicaAckTimeout: s - 1}, nil},
		{"a long wait, no replica_ack", Options{URL: url, Timeout: s, ReplicaAckTimeout: 2 * s}, nil},
		{"replica_ack and no timeout", Options{URL: url, ReplicaAck: 1, ReplicaAckTimeout: s}, []string{"timeout"}},
	} {
		var got []string
		for _, p := range c.opts.Check("store.redis") {
			got = append(got, p.Key)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: Check names %q, want %q", c.name, got, c.want)
		}
	}
}

// TestDefaultsFillOnlyWhatIsUnset checks Defaults: the default prefix and
// timeouts where unset, addresses never nil, and what is set kept.
func TestDefaultsFillOnlyWhatIsUnset(t *testing.T) {
	d := Options{}.Defaults().(Options)
	if d.Addrs == nil || len(d.Addrs) != 0 || d.KeyPrefix != DefaultKeyPrefix || d.Timeout != DefaultTimeout ||
		d.ReplicaAckTimeout != DefaultReplicaAckTimeout {
		t.Errorf("Defaults of nothing = %+v", d)
	}
	set := Options{Addrs: []string{"a:1"}, KeyPrefix: "p:", Timeout: time.Second, ReplicaAckTimeout: time.Millisecond}
	if d := set.Defaults().(Options); !slices.Equal(d.Addrs, set.Addrs) || d.KeyPrefix != "p:" || d.Timeout != time.Second ||
		d.ReplicaAckTimeout != time.Millisecond {
		t.Errorf("Defaults of %+v = %+v, want it unchanged", set, d)
	}
}

// TestDescribeNeverShowsThePassword checks how each deployment is named.
func TestDescribeNeverShowsThePassword(t *testing.T) {
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{URL: "redis://:secret@db:6379/0"}, "redis://:xxxxx@db:6379/0"},
		{Options{URL: "redis://:secret@db:port"}, "redis"},
		{Options{Addrs: []string{"a:1", "b:2"}, MasterName: "m"}, "sentinel m via a:1,b:2"},
		{Options{Addrs: []string{"a:1", "b:2"}}, "cluster a:1,b:2"},
	} {
		got := c.opts.Describe()
		if got != c.want || strings.Contains(got, "secret") {
			t.Errorf("Describe(%+v) = %q, want %q", c.opts, got, c.want)
		}
	}
}
