package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/config"
	"github.com/idempotency-proxy/idempotency-proxy/proxy"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// openStore opens the store the configuration selects: each kind's
// options open their own store (store.Options).
func openStore(c config.Store, log *slog.Logger) (store.Store, error) {
	opts := c.Options()
	if opts == nil {
		// Load refuses an unknown kind; a Config built in code may not.
		return nil, fmt.Errorf("store.kind: unknown store kind %q", c.Kind)
	}
	return opts.Open(log)
}

// prepareStore lets a store set itself up in its server (the Postgres store
// creates its table). A store that does not answer is no reason not to
// start: the admin listener's first check logs why, /readyz answers 503,
// and the store prepares itself once it answers. Anything else (a table of
// another shape) stops the start.
func prepareStore(st store.Store) error {
	p, ok := st.(store.Preparer)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), startCheckTimeout)
	defer cancel()
	if err := p.Prepare(ctx); err != nil && !errors.Is(err, store.ErrUnavailable) {
		return err
	}
	return nil
}

func handlerOptions(cfg *config.Config, st proxy.Store, log *slog.Logger, m *proxy.Metrics) proxy.Options {
	def, routes := policies(cfg)
	return proxy.Options{
		Upstream:         cfg.Upstream.URL,
		UpstreamTimeout:  cfg.Upstream.Timeout,
		MaxExecution:     cfg.Upstream.MaxExecution,
		MaxDetached:      cfg.Upstream.MaxDetached,
		MaxDetachedBytes: int64(cfg.Upstream.MaxDetachedBytes),
		UpstreamProtocol: cfg.Upstream.Protocol,
		AsyncPath:        cfg.AsyncPath,
		AsyncSecret:      []byte(cfg.AsyncSecret),
		Store:            st,
		Default:          def,
		Routes:           routes,
		Logger:           log,
		AccessLog:        cfg.AccessLog,
		AccessLogFields:  cfg.AccessLogFields,
		TrustedProxies:   config.Prefixes(cfg.TrustedProxies),
		Metrics:          m,
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

// rejectsExpired reports whether some route answers expired keys with 410
// key-expired: only then does the store look for tombstones.
func rejectsExpired(cfg *config.Config) bool {
	if cfg.Defaults.ExpiredKeys == proxy.ExpiredReject {
		return true
	}
	for _, r := range cfg.Routes {
		if r.Enabled && r.ExpiredKeys == proxy.ExpiredReject {
			return true
		}
	}
	return false
}

const readyTimeout = time.Second
