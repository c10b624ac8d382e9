// Command idempotency-proxy is a reverse proxy that makes mutating HTTP
// requests safe to retry: see the README.
package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"

	"github.com/idempotency-proxy/idempotency-proxy/config"
	"github.com/idempotency-proxy/idempotency-proxy/internal/logbuf"
)

// version is stamped at build time with -ldflags "-X main.version=…".
var version string

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1 // could not start, or failed while running
	exitUsage   = 2 // bad flags or invalid configuration
)

func main() {
	os.Exit(run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

func run(args, env []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "keys" {
		return runKeys(args[1:], env, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "report" {
		return runReport(args[1:], env, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "config" {
		return runConfigView(args[1:], env, stdout, stderr)
	}
	fs := flag.NewFlagSet("idempotency-proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("config", "", "configuration `file` (YAML); reloaded when it changes")
	fs.String("upstream", "", "upstream `URL` to protect (upstream.url)")
	fs.String("listen", "", "proxy listen `address` (listen, default :8080)")
	fs.String("admin-listen", "", "admin listen `address` for /metrics, /healthz, /readyz (admin_listen, default :9090)")
	fs.String("redis-url", "", "Redis `URL`; switches the store to Redis (store.redis.url)")
	fs.String("postgres-url", "", "PostgreSQL `URL`; switches the store to Postgres (store.postgres.url)")
	fs.String("store-path", "", "`directory` of the file store, kept across restarts; switches the store to it (store.file.path)")
	fs.String("log-level", "", "debug, info, warn or error (log_level, default info)")
	validate := fs.Bool("validate", false, "check the configuration, print its problems and exit")
	check := fs.Bool("check", false, "check the configuration, the store and the upstream, one line each, and exit")
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {} // see parseFailed (usage.go)
	if err := fs.Parse(args); err != nil {
		return parseFailed(err, fs, stdout, stderr)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected arguments: %s\n", strings.Join(fs.Args(), " "))
		return exitUsage
	}
	if *showVersion {
		fmt.Fprintf(stdout, "idempotency-proxy %s\n", buildVersion())
		return exitOK
	}

	src := config.Source{File: *file, Env: env, Overrides: map[string]string{}}
	flagKeys := config.Flags() // the flags defined above that set a key
	fs.Visit(func(f *flag.Flag) {
		if key, ok := flagKeys[f.Name]; ok {
			src.Overrides[key] = f.Value.String()
		}
	})
	cfg, err := config.Load(src)
	if err != nil {
		printProblems(stderr, err)
		return exitUsage
	}
	if *validate {
		fmt.Fprintln(stdout, "config OK")
		return exitOK
	}
	if *check {
		return runCheck(cfg, stdout)
	}

	level := new(slog.LevelVar)
	level.Set(cfg.LogLevel.Level())
	// Access lines gather in a buffer, every other line is written at
	// once (logging.go); what is still buffered at the end is written out.
	out := logbuf.New(stderr, logbuf.Size, logbuf.Delay)
	defer out.Close()
	log := newLogger(out.Immediate(), level)
	if err := serve(cfg, src, level, log, out); err != nil {
		log.Error("stopped", "error", err)
		return exitFailure
	}
	return exitOK
}

// printProblems writes every configuration problem on its own line.
func printProblems(w io.Writer, err error) {
	fmt.Fprintln(w, "invalid configuration:")
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintf(w, "  %s\n", line)
	}
}

// buildVersion is the stamped version, else the module version the binary
// was built from, else "devel".
func buildVersion() string {
	if version != "" {
		return version
	}
	bi, _ := debug.ReadBuildInfo()
	return versionOf(bi)
}

// versionOf is the tag the build recorded ("v1.4.0"); for a build of a
// checkout, the commit it was built from, with "-dirty" when the tree had
// changes: "devel+3f2a1b9c0d4e-dirty". Since Go 1.24 such a build records
// a pseudo-version ("v0.0.0-20261130091721-3f2a1b9c0d4e+dirty"), which
// names the same commit less readably, so it gets the same form. "devel"
// when the build recorded neither (-buildvcs=false, no VCS).
func versionOf(bi *debug.BuildInfo) string {
	if bi == nil {
		return "devel"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value[:min(12, len(s.Value))]
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	v := bi.Main.Version
	// A pseudo-version always carries the commit's first 12 hex digits;
	// a tag does not.
	fromCheckout := v == "" || v == "(devel)" || (rev != "" && strings.Contains(v, "-"+rev))
	switch {
	case !fromCheckout:
		return v
	case rev == "":
		return "devel"
	}
	return "devel+" + rev + dirty
}
