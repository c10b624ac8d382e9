package admin

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// health tracks what readiness last saw of the store, so that a problem is
// logged when it appears and when it clears, not on every probe.
type health struct {
	pinger   Pinger
	reporter HealthReporter // nil when the store reports no health
	metrics  *Metrics
	log      *slog.Logger

	mu      sync.Mutex
	checked bool // a check ran: the next change is a transition
	down    bool
	unsafe  bool
	full    bool
}

// checkResult is one readiness check: err from the ping; h and herr from
// Health when the ping answered.
type checkResult struct {
	err  error
	h    store.Health
	herr error
}

func (hs *health) init(p Pinger, m *Metrics, log *slog.Logger) {
	hs.pinger, hs.metrics, hs.log = p, m, log
	hs.reporter, _ = p.(HealthReporter)
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
	hs.record(res)
	return res
}

func (hs *health) record(res checkResult) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
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
}

// serveReady answers 200 while the store answers a ping, 503 with the
// cause otherwise. A store that answers but may evict keys, or is full,
// stays ready (restarting or unrouting the proxy fixes neither) and is
// named in the body.
func (h *Handler) serveReady(w http.ResponseWriter, r *http.Request) {
	res := h.health.check(r.Context(), h.opts.ReadyTimeout, h.opts.ObservePing)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
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
