package redistest

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster, every slot assigned: masters only, or with
// one replica per master (WithReplicas).
type Cluster struct {
	// Nodes are every node, masters and replicas.
	Nodes []*Server
	// Masters are the nodes that hold slots; Replicas[i], when there are
	// replicas, replicates Masters[i].
	Masters, Replicas []*Server
}

// ClusterOption tunes StartCluster.
type ClusterOption func(*clusterConfig)

type clusterConfig struct{ replicas int }

// WithReplicas gives every master one replica.
func WithReplicas() ClusterOption {
	return func(c *clusterConfig) { c.replicas = 1 }
}

// StartCluster runs masters (at least 3, as redis-cli requires) cluster-mode
// servers, and their replicas if asked, joins them with redis-cli --cluster
// create and returns once every node reports cluster_state:ok and every
// replica's link to its master is up.
func StartCluster(t testing.TB, masters int, opts ...ClusterOption) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("StartCluster: need at least 3 masters, got %d", masters)
	}
	var cfg clusterConfig
	for _, o := range opts {
		o(&cfg)
	}
	cli := lookBinary(t, "redis-cli")
	c := &Cluster{}
	for range masters * (1 + cfg.replicas) {
		c.Nodes = append(c.Nodes, Start(t,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000",
			// A master would wait 5 s for more replicas before the first sync.
			"--repl-diskless-sync-delay", "0"))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(cfg.replicas), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, n := range c.Nodes {
		if err := waitClusterOK(ctx, n); err != nil {
			t.Fatalf("cluster node %s: %v", n.Addr(), err)
		}
	}
	c.findRoles(ctx, t)
	if cfg.replicas > 0 {
		c.waitAcknowledging(ctx, t)
	}
	return c
}

// waitAcknowledging waits until each master counts its replica for WAIT,
// which it does once the replica acknowledged the stream, up to a second
// after the link is up. The WAITs are not the test's: the masters'
// command counts start afresh.
func (c *Cluster) waitAcknowledging(ctx context.Context, t testing.TB) {
	t.Helper()
	for _, m := range c.Masters {
		mc := m.Client(t)
		poll(ctx, t, "replica of "+m.Addr()+" acknowledging writes", func() (bool, string) {
			n, err := mc.Do(ctx, "WAIT", 1, 100).Int()
			return err == nil && n >= 1, fmt.Sprint(n, err)
		})
		if err := mc.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatalf("CONFIG RESETSTAT on %s: %v", m.Addr(), err)
		}
	}
}

// findRoles sorts the nodes into Masters and Replicas as redis-cli made
// them, waiting for each replica's link to its master.
func (c *Cluster) findRoles(ctx context.Context, t testing.TB) {
	t.Helper()
	byAddr := map[string]*Server{}
	for _, n := range c.Nodes {
		byAddr[n.Addr()] = n
	}
	replicaOf := map[*Server]*Server{}
	for _, n := range c.Nodes {
		nc := n.Client(t)
		var master string
		poll(ctx, t, "role of "+n.Addr(), func() (bool, string) {
			info, err := nc.Info(ctx, "replication").Result()
			if err != nil {
				return false, err.Error()
			}
			f := map[string]string{}
			for line := range strings.Lines(info) {
				k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
				f[k] = v
			}
			switch {
			case f["role"] == "master":
				master = ""
				return true, ""
			case f["master_link_status"] == "up":
				master = net.JoinHostPort(f["master_host"], f["master_port"])
				return true, ""
			}
			return false, "replica link " + f["master_link_status"]
		})
		if master != "" {
			replicaOf[byAddr[master]] = n
		}
	}
	replicas := slices.Collect(maps.Values(replicaOf))
	for _, n := range c.Nodes {
		if slices.Contains(replicas, n) {
			continue
		}
		c.Masters = append(c.Masters, n)
		if r := replicaOf[n]; r != nil {
			c.Replicas = append(c.Replicas, r)
		}
	}
	if len(replicaOf) > 0 && len(c.Replicas) != len(c.Masters) {
		t.Fatalf("cluster: %d masters but %d with a replica", len(c.Masters), len(c.Replicas))
	}
}

// Addrs are the host:port addresses of the nodes.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// waitClusterOK polls CLUSTER INFO until the node sees a healthy cluster.
func waitClusterOK(ctx context.Context, n *Server) error {
	c := n.Client(n.t)
	var last string
	for ctx.Err() == nil {
		info, err := c.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return nil
		}
		last = fmt.Sprintf("%q %v", firstLine(info), err)
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("cluster_state not ok: %s", last)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}
