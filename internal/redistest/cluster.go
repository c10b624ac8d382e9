package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of masters without replicas, every slot
// assigned.
type Cluster struct {
	Nodes []*Server
}

// StartCluster runs masters (at least 3, as redis-cli requires) cluster-mode
// servers, joins them with redis-cli --cluster create and returns once every
// node reports cluster_state:ok.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("StartCluster: need at least 3 masters, got %d", masters)
	}
	cli := lookBinary(t, "redis-cli")
	c := &Cluster{}
	for range masters {
		c.Nodes = append(c.Nodes, Start(t,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000"))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
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
	return c
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
