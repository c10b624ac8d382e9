package redisstore

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// node is one master: the only one of a single node or Sentinel
// deployment (addr ""), or one of a Cluster's.
type node struct {
	addr string
	c    redis.Cmdable
}

// masters lists the masters that hold the store's keys, a Cluster's in
// address order so that a List cursor can name where it stopped.
func (s *Store) masters(ctx context.Context) ([]node, error) {
	cc, ok := s.c.(*redis.ClusterClient)
	if !ok {
		return []node{{c: s.c}}, nil
	}
	var mu sync.Mutex
	var out []node
	err := cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		out = append(out, node{addr: c.Options().Addr, c: c})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b node) int { return strings.Compare(a.addr, b.addr) })
	return out, nil
}

// infoFields parses an INFO reply into its name:value fields.
func infoFields(info string) map[string]string {
	f := map[string]string{}
	for line := range strings.Lines(info) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && !strings.HasPrefix(name, "#") {
			f[name] = value
		}
	}
	return f
}
