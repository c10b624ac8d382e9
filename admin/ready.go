package admin

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/proxy/execution"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// health tracks what readiness last saw of the store, so that a problem is
// logged when it appears and when it clears, not on every probe.
type health struct {
	pinger   Pinger
	reporter HealthReporter // nil when the store reports no health
	metrics  *Metrics
	log      *slog.Logger

	lockTTLs func() map[string]time.Duration // nil: nothing to check

	mu         sync.Mutex
	checked    bool // a check ran: the next change is a transition
	down       bool
	unsafe     bool
	full       bool
	short      string // the routes whose lock_ttl cannot outlive a failover, as last logged
	losses     int    // times the store forgot its data since the process started
	lastLoss   string
	lastLossAt time.Time
}

// checkResult is one readiness check: err from the ping; h and herr from
// Health when the ping answered; what the proxy learned of the store so far.
type checkResult struct {
	err  error
	h    store.Health
	herr error

	short      []string // "route (lock_ttl 3s)" of each lease that cannot outlive a failover
	needTTL    time.Duration
	losses     int
	lastLoss   string
	lastLossAt time.Time
}

func (hs *health) init(p Pinger, m *Metrics, log *slog.Logger, lockTTLs func() map[string]time.Duration) {
	hs.pinger, hs.metrics, hs.log, hs.lockTTLs = p, m, log, lockTTLs
	hs.reporter, _ = p.(HealthReporter)
}

// MinLockTTL is the shortest lock_ttl whose lease outlives a failover
// lasting failover, as the lease's renewal rule gives it
// (execution.MinLockTTL; docs/redis.md, "A lease must outlive a
// failover"), rounded up to a whole second.
func MinLockTTL(failover time.Duration) time.Duration {
	return (execution.MinLockTTL(failover) + time.Second - 1).Truncate(time.Second)
}

// shortLockTTLs lists the routes whose lock_ttl is below MinLockTTL.
func (hs *health) shortLockTTLs(failover time.Duration) ([]string, time.Duration) {
	if failover <= 0 || hs.lockTTLs == nil {
		return nil, 0
	}
	need := MinLockTTL(failover)
	var short []string
	for route, ttl := range hs.lockTTLs() {
		if ttl < need {
			short = append(short, fmt.Sprintf("%s (lock_ttl %s)", route, ttl))
		}
	}
	slices.Sort(short)
	return short, need
}

// check pings the store and reads its health, updates the gauge, and logs
// what changed since the last check.
func (hs *health) check(ctx context.Context, timeout time.Duration, observe func(time.Duration, error)) checkResult {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var res checkResult
	start := time.Now()
	res.err = hs.pinger.Ping(ctx)
	if observe != nil {
		observe(time.Since(start), res.err)
	}
	if res.err == nil && hs.reporter != nil {
		res.h, res.herr = hs.reporter.Health(ctx)
	}
	hs.record(&res)
	return res
}

func (hs *health) record(res *checkResult) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	defer func() {
		res.losses, res.lastLoss, res.lastLossAt = hs.losses, hs.lastLoss, hs.lastLossAt
	}()
	first := !hs.checked
	hs.checked = true

	down := res.err != nil
	switch {
	case down && (first || !hs.down):
		hs.log.Error("store unavailable: requests get on_store_error until it answers; /readyz answers 503", "error", res.err)
	case !down && hs.down:
		hs.log.Info("store answers again")
	}
	hs.down = down
	if down || res.herr != nil {
		return // the last known eviction and fullness stand
	}

	hs.metrics.evictionUnsafe.Set(flag(res.h.EvictionUnsafe))
	hs.metrics.full.Set(flag(res.h.Full))
	if res.h.EvictionUnsafe && (first || !hs.unsafe) {
		hs.log.Error("the store may evict the proxy's keys: an evicted lease or record means a second execution; set maxmemory-policy noeviction",
			"server", res.h.Server, "maxmemory_policy", res.h.EvictionPolicy)
	}
	hs.unsafe = res.h.EvictionUnsafe
	if res.h.Full && (first || !hs.full) {
		hs.log.Warn("the store is full: new keys get the store-full answer until records expire", "server", res.h.Server)
	}
	hs.full = res.h.Full

	for _, loss := range res.h.Forgot {
		hs.metrics.dataLoss.Inc()
		hs.losses++
		hs.lastLoss, hs.lastLossAt = loss, time.Now()
		hs.log.Error("the store forgot what it held: every lease and record on it is gone, and a retry of a request it had recorded executes again; "+
			"run Redis with persistence (appendonly yes) and fail over only to replicas that have the data (docs/redis.md, \"When Redis forgets\")",
			"cause", loss)
	}

	res.short, res.needTTL = hs.shortLockTTLs(res.h.FailoverTime)
	hs.metrics.lockTTLUnsafe.Set(flag(len(res.short) > 0))
	if short := strings.Join(res.short, ", "); short != hs.short {
		if short != "" {
			hs.log.Error("lock_ttl cannot outlive a failover of the store: while no master answers, leases cannot be renewed, and a lease that expires meanwhile lets a retry execute its key again; "+
				"raise lock_ttl on these routes, or lower the sentinels' down-after-milliseconds (docs/redis.md, \"A lease must outlive a failover\")",
				"routes", short, "failover_time", res.h.FailoverTime.String(), "min_lock_ttl", res.needTTL.String())
		}
		hs.short = short
	}
}

// watch checks the store every interval until ctx ends, so that what only a
// check can notice (the store forgot its data, a route's lock_ttl is too
// short) is logged and counted without waiting for a readiness probe.
func (hs *health) watch(ctx context.Context, every, timeout time.Duration, observe func(time.Duration, error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			hs.check(ctx, timeout, observe)
		}
	}
}

// serveReady answers 200 while the store answers a ping, 503 with the
// cause otherwise, and 503 from the moment a shutdown starts (Drain). A store that answers but may evict keys, or is full,
// stays ready (restarting or unrouting the proxy fixes neither) and is
// named in the body.
func (h *Handler) serveReady(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if h.draining.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("draining: the proxy is shutting down and takes no new requests\n"))
		return
	}
	res := h.health.check(r.Context(), h.opts.ReadyTimeout, h.opts.ObservePing)
	if res.err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("store unavailable: " + oneLine(res.err.Error()) + "\n"))
		return
	}
	var b strings.Builder
	b.WriteString("ok\n")
	switch {
	case res.herr != nil:
		b.WriteString("warning: store health unknown: " + oneLine(res.herr.Error()) + "\n")
	default:
		if res.h.EvictionUnsafe {
			b.WriteString("warning: store eviction unsafe: maxmemory-policy is " + res.h.EvictionPolicy +
				"; set maxmemory-policy noeviction, or evicted keys execute twice\n")
		}
		if res.h.Full {
			b.WriteString("warning: store full: new keys are refused until records expire or space is added\n")
		}
		if len(res.short) > 0 {
			fmt.Fprintf(&b, "warning: lock_ttl cannot outlive a failover (up to %s): %s; set lock_ttl to at least %s\n",
				res.h.FailoverTime, strings.Join(res.short, ", "), res.needTTL)
		}
	}
	if res.losses > 0 {
		fmt.Fprintf(&b, "warning: store data lost %d time(s) since start, last at %s: %s; retries of requests it had recorded execute again\n",
			res.losses, res.lastLossAt.UTC().Format(time.RFC3339), oneLine(res.lastLoss))
	}
	w.Write([]byte(b.String()))
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", "; ") }

func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
