package main

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idempotency-proxy/idempotency-proxy/proxy"
)

// adminHandler serves the admin listener: metrics, liveness, readiness.
// It is never reachable through the proxy listener.
func adminHandler(reg *prometheus.Registry, st pinger, m *proxy.Metrics) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		start := time.Now()
		err := st.Ping(ctx)
		m.ObservePing(time.Since(start), err)
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("store unavailable: " + err.Error() + "\n"))
			return
		}
		w.Write([]byte("ok\n"))
	})
	return mux
}
