package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/admin"
	"github.com/idempotency-proxy/idempotency-proxy/config"
	"github.com/idempotency-proxy/idempotency-proxy/internal/gctune"
	"github.com/idempotency-proxy/idempotency-proxy/proxy"
	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/seal"
)

// Server timeouts of the proxy listener. ReadTimeout bounds slow request
// bodies (slowloris); there is no write timeout because responses stream
// for as long as the upstream takes (bounded by upstream.timeout).
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 60 * time.Second
	idleTimeout       = 120 * time.Second
	maxHeaderBytes    = 1 << 20
	// abortGrace is how long the requests aborted at shutdown_timeout get
	// to answer their clients 502: their upstream calls are cancelled and
	// nothing is written to the store, so it takes milliseconds.
	abortGrace = time.Second
	// minHeapGoal is the smallest heap goal the garbage collector is given
	// unless the operator sets GOGC (internal/gctune, docs/operating.md).
	minHeapGoal = 32 << 20
)

// serve runs the proxy until SIGTERM or SIGINT, then drains it. The
// access lines go to access, the other lines to log.
func serve(cfg *config.Config, src config.Source, level *slog.LevelVar, log *slog.Logger, access io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// SIGHUP is a reload from the first moment: one that arrives while the
	// store is being prepared waits for the reloader, rather than end the
	// process, as its default action would.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	gc := tuneGC(src.Env)
	defer gc.stop()
	// The files are watched from the first moment too: an edit made while
	// the store is being prepared is a reload once the reloader runs.
	r := &reloader{src: src, file: cfg.File, started: cfg, current: cfg, level: level, log: log}
	w := r.startWatching()
	if w != nil {
		defer w.Close()
	}

	raw, err := openStore(cfg.Store, log)
	if err != nil {
		return err
	}
	// Everything above the store sees it through the seal layer, so no
	// store holds a recorded header or body in clear; the size gauges are
	// the store's own.
	tombs := store.WithTombstones(raw, nil)
	tombs.Check(rejectsExpired(cfg))
	st := seal.New(tombs, cfg.Store.Encryption.Keyring)
	defer st.Close()
	if err := prepareStore(raw); err != nil {
		return err
	}

	tok, err := adminToken(cfg.Admin)
	if err != nil {
		return err
	}
	token := admin.NewToken(tok)
	reg, metrics, adminMetrics := newRegistry(raw)
	tr, err := startTracing(cfg.Tracing, log)
	if err != nil {
		return err
	}
	defer tr.stop()
	opts := handlerOptions(cfg, st, log, metrics)
	opts.AccessLogOutput = access
	tr.wrap(&opts)
	h, err := proxy.New(opts)
	if err != nil {
		return err
	}
	r.handler, r.token, r.sealer, r.tombs, r.metrics = h, token, st, tombs, adminMetrics
	adminHandler := newAdmin(cfg, st, reg, metrics, adminMetrics, h, token, r.view, log)

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("proxy listener: %w", err)
	}
	adminLn, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		ln.Close()
		return fmt.Errorf("admin listener: %w", err)
	}
	errorLog := serverErrorLog(log)
	srv := &http.Server{
		Handler:           tr.handler(h),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          errorLog,
		Protocols:         listenerProtocols(),
	}
	adminSrv := admin.NewServer(adminHandler, errorLog)
	failed := make(chan error, 2)
	go func() { failed <- srv.Serve(ln) }()
	go func() { failed <- adminSrv.Serve(adminLn) }()

	go r.run(ctx, hup, w)
	go adminHandler.WatchStore(ctx, storeWatchInterval)

	log.Info("started", "version", buildVersion(), "listen", ln.Addr().String(),
		"admin_listen", adminLn.Addr().String(), "upstream", cfg.Upstream.URL.Redacted(),
		"store", cfg.Store.Kind, "routes", len(cfg.Routes), "config_file", cfg.File,
		"admin_api", token.Enabled(), "pprof", cfg.Admin.PProf, "gc", gc.mode, "encryption", cfg.Store.Encryption.Keyring)

	select {
	case <-ctx.Done():
	case err := <-failed:
		return fmt.Errorf("listener failed: %w", err)
	}
	stop() // a second signal kills the process the default way
	adminHandler.Drain()
	return drain(srv, adminSrv, h, r.config().ShutdownTimeout, log)
}

// listenerProtocols is what the proxy listener speaks: HTTP/1.1, and HTTP/2
// without TLS with prior knowledge (h2c, as gRPC clients send it), told
// apart on each connection by its first bytes (the HTTP/2 preface). An
// HTTP/1.1 request asking to upgrade to h2c is served over HTTP/1.1.
func listenerProtocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}

// drain stops accepting, and lets in-flight requests finish and be
// recorded within timeout: the requests whose clients wait, the calls
// going on detached from theirs, and the records still being retried. Then
// it aborts the rest: their upstream calls are cancelled, their clients
// answered 502, and their keys left locked until lock_ttl, as after a crash
// (the upstream may still be running them), so that no retry executes them
// again before then. Nothing waits past timeout but those 502s.
func drain(srv, adminSrv *http.Server, h *proxy.Handler, timeout time.Duration, log *slog.Logger) error {
	log.Info("shutting down: draining in-flight requests; /readyz answers 503", "shutdown_timeout", timeout.String())
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := srv.Shutdown(ctx)
	if err == nil {
		err = h.Wait(ctx)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		log.Warn("shutdown_timeout reached: aborting the requests still in flight; keys whose request may still run stay locked until lock_ttl")
		h.Abort()
		grace, cancelGrace := context.WithTimeout(context.Background(), abortGrace)
		defer cancelGrace()
		if srv.Shutdown(grace) != nil {
			srv.Close()
		}
	}
	adminCtx, cancelAdmin := context.WithTimeout(context.Background(), time.Second)
	defer cancelAdmin()
	adminSrv.Shutdown(adminCtx)
	log.Info("stopped")
	return nil
}

// gcTuning is how the garbage collector is paced: by the operator's GOGC,
// or with the heap goal kept at minHeapGoal or more.
type gcTuning struct {
	mode string // for the start log line
	stop func()
}

// tuneGC keeps the heap goal at minHeapGoal or more, unless env sets GOGC:
// then the runtime paces the collector as the operator asked.
func tuneGC(env []string) gcTuning {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GOGC="); ok {
			return gcTuning{mode: "GOGC=" + v, stop: func() {}}
		}
	}
	return gcTuning{
		mode: fmt.Sprintf("min_heap_goal=%dMiB", minHeapGoal>>20),
		stop: gctune.KeepHeapGoal(minHeapGoal, nil),
	}
}
