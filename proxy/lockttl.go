package proxy

import "time"

// LockTTLs returns the lock_ttl of the defaults ("default") and of every
// enabled route, by its match, under the live configuration: what a lease
// must outlive is checked against them (admin, "lock_ttl_unsafe").
func (h *Handler) LockTTLs() map[string]time.Duration {
	t := h.routes.Load()
	out := map[string]time.Duration{defaultRoute: t.fallback.policy.LockTTL}
	for label, rt := range t.byPattern {
		if !rt.disabled {
			out[label] = rt.policy.LockTTL
		}
	}
	return out
}
