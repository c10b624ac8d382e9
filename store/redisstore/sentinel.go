package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// FailoverMargin is what a Sentinel failover takes beyond the master's
// down-after-milliseconds: the sentinels' election and the promotion (about
// 1.4 s measured with three sentinels on loopback), and the proxy's
// reconnection to the new master (about 0.5 s). docs/redis.md, "A lease
// must outlive a failover".
const FailoverMargin = 2 * time.Second

// sentinel asks the sentinels how long they wait before failing a master
// over: leases cannot be renewed meanwhile.
type sentinel struct {
	master  string
	clients []*redis.SentinelClient
}

func newSentinel(opts Options) *sentinel {
	s := &sentinel{master: opts.MasterName}
	for _, addr := range opts.Addrs {
		s.clients = append(s.clients, redis.NewSentinelClient(&redis.Options{
			Addr: addr, TLSConfig: opts.TLSConfig,
			DialTimeout: opts.Timeout, ReadTimeout: opts.Timeout, WriteTimeout: opts.Timeout,
			MaxRetries: -1, DialerRetries: 1, PoolSize: 1, DisableIdentity: true, Protocol: 2,
		}))
	}
	return s
}

// failoverTime is the longest time the master may go without a successor:
// the largest down-after-milliseconds any sentinel that answers has for it,
// plus FailoverMargin.
func (s *sentinel) failoverTime(ctx context.Context) (time.Duration, error) {
	var longest time.Duration
	var errs []error
	for _, c := range s.clients {
		m, err := c.Master(ctx, s.master).Result()
		if err != nil {
			errs = append(errs, fmt.Errorf("SENTINEL MASTER %s at %s: %w", s.master, c.String(), err))
			continue
		}
		ms, err := strconv.ParseInt(m["down-after-milliseconds"], 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("SENTINEL MASTER %s: down-after-milliseconds %q", s.master, m["down-after-milliseconds"]))
			continue
		}
		longest = max(longest, time.Duration(ms)*time.Millisecond)
	}
	if longest == 0 {
		return 0, errors.Join(errs...)
	}
	return longest + FailoverMargin, nil
}

func (s *sentinel) close() {
	for _, c := range s.clients {
		c.Close()
	}
}
