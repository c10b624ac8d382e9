package redisstore

import (
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestUnsetTimeoutsAreTheDefaults checks that a Timeout or
// ReplicaAckTimeout left at 0 is the default, for the operations and for
// the client's own dial, read and write bounds alike, and that one set is
// kept.
func TestUnsetTimeoutsAreTheDefaults(t *testing.T) {
	for _, c := range []struct {
		opts            Options
		timeout, ackTTL time.Duration
	}{
		{Options{URL: "redis://127.0.0.1:1/0", ReplicaAck: 1}, DefaultTimeout, DefaultReplicaAckTimeout},
		{Options{URL: "redis://127.0.0.1:1/0", ReplicaAck: 1, Timeout: 3 * time.Second, ReplicaAckTimeout: time.Second},
			3 * time.Second, time.Second},
	} {
		s := newStore(t, c.opts)
		o := s.c.(*redis.Client).Options()
		if s.timeout != c.timeout || o.DialTimeout != c.timeout || o.ReadTimeout != c.timeout || o.WriteTimeout != c.timeout {
			t.Errorf("Timeout %v: the store's %v, the client's dial %v, read %v, write %v; want %v",
				c.opts.Timeout, s.timeout, o.DialTimeout, o.ReadTimeout, o.WriteTimeout, c.timeout)
		}
		if s.acks.timeout != c.ackTTL {
			t.Errorf("ReplicaAckTimeout %v: the wait's bound is %v, want %v", c.opts.ReplicaAckTimeout, s.acks.timeout, c.ackTTL)
		}
	}
	s, _ := NewFromClient(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), "", 0)
	t.Cleanup(func() { _ = s.Close() })
	if s.timeout != DefaultTimeout || s.prefix != DefaultKeyPrefix {
		t.Errorf("NewFromClient with timeout 0 and no prefix: %v, %q; want %v, %q", s.timeout, s.prefix, DefaultTimeout, DefaultKeyPrefix)
	}
}

// TestOneAddressWithoutAMasterNameIsASingleNode checks that Addrs of one
// address and no MasterName is a client of that one node, not a Cluster
// client; several addresses are a Cluster's seeds, or with a MasterName
// the sentinels'.
func TestOneAddressWithoutAMasterNameIsASingleNode(t *testing.T) {
	if _, ok := newStore(t, Options{Addrs: []string{"127.0.0.1:1"}}).c.(*redis.Client); !ok {
		t.Error("one address: no single-node client")
	}
	if _, ok := newStore(t, Options{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}}).c.(*redis.ClusterClient); !ok {
		t.Error("two addresses: not a Cluster client")
	}
	sentinels := Options{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, MasterName: "m"}
	if _, ok := newStore(t, sentinels).c.(*redis.ClusterClient); ok {
		t.Error("two Sentinel addresses with a MasterName: a Cluster client")
	}
}

// TestDefaultsAreTheDocumentedOnes checks the defaults against the table
// of docs/configuration.md, which operators read.
func TestDefaultsAreTheDocumentedOnes(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := func(key string) string {
		m := regexp.MustCompile("(?m)^\\| `store\\.redis\\." + key + "` \\| `([^`]*)` \\|").FindSubmatch(doc)
		if m == nil {
			t.Fatalf("docs/configuration.md has no row for store.redis.%s", key)
		}
		return string(m[1])
	}
	if got, want := DefaultKeyPrefix, documented("key_prefix"); got != want {
		t.Errorf("DefaultKeyPrefix = %q, documented %q", got, want)
	}
	for key, got := range map[string]time.Duration{"timeout": DefaultTimeout, "replica_ack_timeout": DefaultReplicaAckTimeout} {
		if want, err := time.ParseDuration(documented(key)); err != nil || got != want {
			t.Errorf("the default of %s is %v, documented %q", key, got, documented(key))
		}
	}
}
