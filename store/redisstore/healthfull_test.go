package redisstore

import "testing"

// TestMasterUsingAllItsMaxmemoryIsFull checks when a master's INFO makes
// Health report the store full: under noeviction, from the moment it uses
// as much memory as its maxmemory; never under an evicting policy, nor
// without a maxmemory.
func TestMasterUsingAllItsMaxmemoryIsFull(t *testing.T) {
	for _, c := range []struct {
		policy, used, limit string
		want                bool
	}{
		{"noeviction", "1000", "1000", true},
		{"noeviction", "1001", "1000", true},
		{"noeviction", "999", "1000", false},
		{"noeviction", "1000", "0", false},
		{"allkeys-lru", "1000", "1000", false},
	} {
		f := map[string]string{"used_memory": c.used, "maxmemory": c.limit}
		if got := full(c.policy, f); got != c.want {
			t.Errorf("%s, used_memory %s of maxmemory %s: full = %v, want %v", c.policy, c.used, c.limit, got, c.want)
		}
	}
}

// TestNodeErrorsNameTheClusterMaster checks the prefix that names a
// Cluster master in an error about it, and names nothing otherwise.
func TestNodeErrorsNameTheClusterMaster(t *testing.T) {
	if got := at(node{}); got != "" {
		t.Errorf("at(the only master) = %q, want nothing", got)
	}
	if got, want := at(node{addr: "10.0.0.7:7000"}), "10.0.0.7:7000: "; got != want {
		t.Errorf("at(a Cluster master) = %q, want %q", got, want)
	}
}
