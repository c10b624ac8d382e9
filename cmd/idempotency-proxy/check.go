package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/admin"
	"github.com/idempotency-proxy/idempotency-proxy/config"
	"github.com/idempotency-proxy/idempotency-proxy/store/filestore"
)

// checkTimeout bounds each network check of --check.
const checkTimeout = 5 * time.Second

// runCheck is --check: after the configuration loaded, it pings the store
// and connects to the upstream, printing one line per check. Warnings (a
// Redis that may evict keys) do not fail it.
func runCheck(cfg *config.Config, stdout io.Writer) int {
	failed := false
	line := func(status, what, detail string) {
		fmt.Fprintf(stdout, "%-4s  %-8s  %s\n", status, what, detail)
		failed = failed || status == "FAIL"
	}
	where := "flags and environment"
	if cfg.File != "" {
		where = cfg.File
	}
	line("ok", "config", "valid ("+where+")")
	if cfg.Admin.TokenFile != "" {
		// The proxy refuses to start without it.
		if _, err := adminToken(cfg.Admin); err != nil {
			line("FAIL", "admin", err.Error())
		} else {
			line("ok", "admin", "token read from "+cfg.Admin.TokenFile)
		}
	}
	if kr := cfg.Store.Encryption.Keyring; kr != nil {
		// Loading the configuration read it; key ids only, never a key.
		line("ok", "encrypt", kr.String())
	}
	checkStore(cfg.Store, line)
	checkUpstream(cfg.Upstream.URL, line)
	if failed {
		return exitFailure
	}
	return exitOK
}

func checkStore(c config.Store, line func(status, what, detail string)) {
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	st, err := openStore(c, slog.New(slog.DiscardHandler))
	if inUse := (*filestore.InUseError)(nil); errors.As(err, &inUse) {
		// The running proxy holds it (a startup probe runs --check in
		// the proxy's container): that is the store working.
		line("ok", "store", storeTarget(c)+": "+inUse.HeldBy())
		return
	}
	if err != nil {
		line("FAIL", "store", err.Error())
		return
	}
	defer st.Close()
	target := storeTarget(c)
	if err := st.Ping(ctx); err != nil {
		line("FAIL", "store", target+": "+err.Error())
		return
	}
	hr, ok := st.(admin.HealthReporter)
	if !ok {
		line("ok", "store", target+" answers")
		return
	}
	if c.Kind == "memory" {
		// Nothing to reach: say what it is instead of naming it twice.
		line("ok", "store", "memory, in this process: every lease and record is lost when it exits")
		return
	}
	h, err := hr.Health(ctx)
	switch {
	case err != nil:
		line("FAIL", "store", target+" answers, but its health could not be read: "+err.Error())
		return
	case h.EvictionUnsafe:
		line("WARN", "store", fmt.Sprintf("%s: %s, maxmemory-policy %s: Redis may evict the proxy's keys and a request may run twice; set maxmemory-policy noeviction",
			target, h.Server, h.EvictionPolicy))
	case h.EvictionPolicy != "":
		line("ok", "store", fmt.Sprintf("%s: %s, maxmemory-policy %s", target, h.Server, h.EvictionPolicy))
	case h.Detail != "":
		line("ok", "store", fmt.Sprintf("%s: %s; %s", target, h.Server, h.Detail))
	default:
		line("ok", "store", fmt.Sprintf("%s: %s", target, h.Server))
	}
	if h.Full {
		line("WARN", "store", "the store is full: new keys are refused until records expire")
	}
}

// storeTarget names the store without credentials.
func storeTarget(c config.Store) string {
	if opts := c.Options(); opts != nil {
		return opts.Describe()
	}
	return c.Kind
}

func checkUpstream(u *url.URL, line func(status, what, detail string)) {
	addr := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		addr = net.JoinHostPort(u.Hostname(), port)
	}
	d := net.Dialer{Timeout: checkTimeout}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		line("FAIL", "upstream", err.Error())
		return
	}
	conn.Close()
	line("ok", "upstream", "tcp "+addr+" accepts connections")
}
