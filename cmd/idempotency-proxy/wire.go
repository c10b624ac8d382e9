package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idempotency-proxy/idempotency-proxy/config"
	"github.com/idempotency-proxy/idempotency-proxy/proxy"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
	"github.com/idempotency-proxy/idempotency-proxy/store/redisstore"
)

// storeCloser is a proxy.Store that holds resources.
type storeCloser interface {
	proxy.Store
	Close() error
}

func openStore(c config.Store, log *slog.Logger) (storeCloser, error) {
	if c.Kind == config.StoreRedis {
		redis.SetLogger(redisLogger{log})
		return redisstore.New(redisstore.Options{
			URL:        c.Redis.URL,
			Addrs:      c.Redis.Addrs,
			MasterName: c.Redis.MasterName,
			KeyPrefix:  c.Redis.KeyPrefix,
			Timeout:    c.Redis.Timeout,
		})
	}
	return memory.New(memory.Options{MaxBytes: int64(c.Memory.MaxBytes), WhenFull: c.Memory.WhenFull}), nil
}

func handlerOptions(cfg *config.Config, st proxy.Store, log *slog.Logger, m *proxy.Metrics) proxy.Options {
	def, routes := policies(cfg)
	return proxy.Options{
		Upstream:        cfg.Upstream.URL,
		UpstreamTimeout: cfg.Upstream.Timeout,
		Store:           st,
		Default:         def,
		Routes:          routes,
		Logger:          log,
		Metrics:         m,
	}
}

// policies translates the configured policies into the handler's terms. A
// configured policy is a proxy.Policy already (its keys are the handler's
// fields); only the route's pattern and switch are renamed.
func policies(cfg *config.Config) (proxy.Policy, []proxy.Route) {
	routes := make([]proxy.Route, len(cfg.Routes))
	for i, r := range cfg.Routes {
		routes[i] = proxy.Route{Pattern: r.Match, Disabled: !r.Enabled, Policy: r.Policy}
	}
	return cfg.Defaults, routes
}

// pinger is what readiness needs from the store.
type pinger interface {
	Ping(ctx context.Context) error
}

const readyTimeout = time.Second

// redisLogger sends go-redis's own log lines (reconnect attempts, pool
// errors) to the JSON log instead of a plain line on stderr.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, "redis client", "detail", fmt.Sprintf(format, v...))
}
