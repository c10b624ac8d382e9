package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/idempotency-proxy/idempotency-proxy/admin"
	"github.com/idempotency-proxy/idempotency-proxy/config"
	"github.com/idempotency-proxy/idempotency-proxy/proxy"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// newRegistry is the registry every metric of the process is registered
// on: the Go runtime's and the process's, the proxy's, and the admin
// listener's (admin operations, store health and, for the memory store,
// its size; for Redis, its replica acknowledgement failures).
func newRegistry(st any) (*prometheus.Registry, *proxy.Metrics, *admin.Metrics) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	pm := proxy.NewMetrics(reg, buildVersion())
	am := admin.NewMetrics(reg)
	if sr, ok := st.(store.StatsReporter); ok {
		admin.RegisterStoreStats(reg, sr)
	}
	if r, ok := st.(replicaAcker); ok {
		admin.RegisterReplicaAck(reg, r.ReplicaAckFailures)
	}
	return reg, pm, am
}

// replicaAcker is a store that waits for replicas (the Redis store's
// replica_ack) and counts the waits that fell short.
type replicaAcker interface {
	ReplicaAckFailures() (begin, complete uint64)
}

// newAdmin builds the admin listener's handler and checks the store once,
// logging the root cause of a failure; the proxy starts either way and
// /readyz answers 503 until the store answers.
func newAdmin(cfg *config.Config, st store.Store, reg *prometheus.Registry, pm *proxy.Metrics, am *admin.Metrics,
	h *proxy.Handler, token *admin.Token, view func() []byte, log *slog.Logger) *admin.Handler {
	a := admin.New(admin.Options{
		Store:        st,
		Gatherer:     reg,
		Metrics:      am,
		Token:        token,
		Hasher:       h,
		Config:       view,
		Report:       h.Report,
		PProf:        cfg.Admin.PProf,
		ObservePing:  pm.ObservePing,
		ReadyTimeout: readyTimeout,
		Logger:       log,
		LockTTLs:     h.LockTTLs,
		Settling:     h.Settling,
	})
	ctx, cancel := context.WithTimeout(context.Background(), startCheckTimeout)
	defer cancel()
	a.CheckStore(ctx) // logs what it finds
	return a
}

// adminToken returns the admin API's token: admin.token, or the content of
// admin.token_file without surrounding whitespace (files usually end in a
// newline). "" leaves the API off.
func adminToken(c config.Admin) (string, error) {
	if c.TokenFile == "" {
		return c.Token, nil
	}
	b, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return "", fmt.Errorf("admin.token_file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("admin.token_file: %s is empty", c.TokenFile)
	}
	return tok, nil
}

// startCheckTimeout bounds the store check at start.
const startCheckTimeout = 2 * time.Second

// storeWatchInterval is how often the store is checked between readiness
// probes: a store that forgot its data is noticed within it.
const storeWatchInterval = 5 * time.Second
