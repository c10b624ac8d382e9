package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// fullWindow is how long after a write refused for lack of memory Health
// still reports the store full: long enough for a readiness probe or two to
// see it, short enough to clear soon after room returns.
const fullWindow = 30 * time.Second

// Health asks every master for its version and eviction policy. Any policy
// but noeviction is EvictionUnsafe: Redis may then drop a lease or record
// and a retry would execute again. The policy comes from CONFIG GET, or from
// INFO where CONFIG is disabled (as on many managed services); "unknown",
// treated as unsafe, when neither says. Full means a write was refused for
// lack of memory in the last fullWindow, or a master under noeviction uses
// all of its maxmemory. An error (wrapping store.ErrUnavailable and the
// cause) means Redis did not answer.
func (s *Store) Health(ctx context.Context) (store.Health, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	nodes, err := s.masters(ctx)
	if err != nil {
		return store.Health{}, s.translate("health", err)
	}
	var versions, policies []string
	h := store.Health{Full: time.Since(time.Unix(0, s.lastFull.Load())) < fullWindow}
	for _, n := range nodes {
		nh, err := nodeHealth(ctx, n)
		if err != nil {
			return store.Health{}, s.translate("health", err)
		}
		versions = appendNew(versions, "redis "+nh.version)
		policies = appendNew(policies, nh.policy)
		h.EvictionUnsafe = h.EvictionUnsafe || nh.policy != "noeviction"
		h.Full = h.Full || nh.full
	}
	h.Server, h.EvictionPolicy = strings.Join(versions, ", "), strings.Join(policies, ", ")
	lost, err := s.checkEpochs(ctx)
	if err != nil {
		return store.Health{}, s.translate("health", err)
	}
	for _, l := range lost {
		h.Forgot = append(h.Forgot, l.String())
	}
	if s.sentinel != nil {
		// The sentinels answering or not changes nothing for the data:
		// an unknown window reads as 0 and warns of nothing.
		h.FailoverTime, _ = s.sentinel.failoverTime(ctx)
	}
	return h, nil
}

type nodeState struct {
	version, policy string
	full            bool
}

func nodeHealth(ctx context.Context, n node) (nodeState, error) {
	// Plain INFO (no section) works on every version and includes the
	// server and memory sections.
	info, err := n.c.Info(ctx).Result()
	if err != nil {
		return nodeState{}, fmt.Errorf("%sINFO: %w", at(n), err)
	}
	f := infoFields(info)
	st := nodeState{version: f["redis_version"], policy: f["maxmemory_policy"]}
	cfg, err := n.c.ConfigGet(ctx, "maxmemory-policy").Result()
	switch {
	case err == nil && cfg["maxmemory-policy"] != "":
		st.policy = cfg["maxmemory-policy"]
	case err != nil && !isRedisError(err):
		return nodeState{}, fmt.Errorf("%sCONFIG GET: %w", at(n), err)
	}
	if st.policy == "" {
		st.policy = "unknown"
	}
	st.full = full(st.policy, f)
	return st, nil
}

// full reports a master under policy whose INFO fields f show it using all
// of its maxmemory: it then refuses writes. Under an evicting policy, or
// with no maxmemory, it makes room instead.
func full(policy string, f map[string]string) bool {
	used, _ := strconv.ParseInt(f["used_memory"], 10, 64)
	limit, _ := strconv.ParseInt(f["maxmemory"], 10, 64)
	return policy == "noeviction" && limit > 0 && used >= limit
}

// isRedisError tells a reply Redis sent (a disabled or renamed CONFIG) from
// a failure to get one.
func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

func at(n node) string {
	if n.addr == "" {
		return ""
	}
	return n.addr + ": "
}

func appendNew(list []string, v string) []string {
	if slices.Contains(list, v) {
		return list
	}
	return append(list, v)
}
