package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/idempotency-proxy/idempotency-proxy/internal/enum"
)

// usageHead and usageTail frame the flag list printed by --help. They name
// what a newcomer looks for next: the other commands, where every
// configuration key is documented, how the environment maps to keys, the two
// listeners, and what each exit status means to a supervisor or a script.
const usageHead = `idempotency-proxy: a reverse proxy that makes retried HTTP requests safe.
Clients send an Idempotency-Key header; the first request with a key runs
upstream once, every retry gets the recorded response back.

Usage:
  idempotency-proxy --upstream URL [flags]      run in front of URL (in-memory store, no file)
  idempotency-proxy --config FILE [flags]       run with a configuration file
  idempotency-proxy --config FILE --validate    check the configuration, print its problems, exit
  idempotency-proxy --config FILE --check       validate, ping the store, connect to the upstream, exit
  idempotency-proxy keys get|delete|list|find|hash
                                                inspect, find and remove recorded keys through the
                                                admin API (docs/operating.md)
  idempotency-proxy config                      print a running proxy's effective configuration,
                                                each value's origin, secrets masked
  idempotency-proxy report [--window 24h] [--json]
                                                per route, what the proxy did or in shadow mode
                                                would do: duplicates, mismatches, missing keys, churn
  idempotency-proxy --version

Flags:
`

const usageTail = `
Configuration:
  Every key is documented, with its default, in config.example.yaml (at the root
  of the repository). Precedence: flag > environment > file > built-in default.
  Each key can be set in the environment as IDEMPOTENCY_PROXY_ + the key path
  upper-cased, with _ for the dots:
    IDEMPOTENCY_PROXY_UPSTREAM_URL=http://127.0.0.1:3000
    IDEMPOTENCY_PROXY_STORE_REDIS_URL=redis://127.0.0.1:6379/0
    IDEMPOTENCY_PROXY_DEFAULTS_LOCK_TTL=30s
    IDEMPOTENCY_PROXY_CONFIG=/etc/idempotency-proxy/config.yaml  (the file, as --config)

Listeners:
  listen (default :8080) proxies every path to the upstream, /healthz included.
  admin_listen (default :9090) serves /metrics, /healthz and /readyz; never proxied.
  Logs are JSON lines on stderr. SIGTERM or SIGINT drains in-flight requests,
  then exits 0; SIGHUP (or an edit of the file) reloads routes and policies.

Exit status:
  0  success; also after a drain on SIGTERM or SIGINT
  1  runtime failure: could not start (address in use, unreadable token file) or
     failed while running; a failed check (--check) or call (keys)
  2  invalid configuration or usage: bad flag, unknown key, bad value

Documentation, in the repository:
  README.md                 quick start
  docs/configuration.md     every key, precedence, routes, reload
  docs/request-handling.md  what each situation answers
  docs/clients.md           how clients retry
  docs/recipes.md           webhooks and clients that cannot send a key
  docs/guarantees.md        what holds when things fail
  docs/operating.md         build, deploy, metrics, alerts, runbooks, the key API
  docs/redis.md             the Redis settings the proxy requires
`

// printUsage writes the help text of fs to w: flags with two dashes, as the
// documentation writes them.
func printUsage(w io.Writer, fs *flag.FlagSet) {
	var b strings.Builder
	b.WriteString(usageHead)
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		fmt.Fprintf(&b, "  --%s", f.Name)
		if name != "" {
			fmt.Fprintf(&b, " %s", name)
		}
		fmt.Fprintf(&b, "\n        %s\n", strings.ReplaceAll(usage, "\n", "\n        "))
	})
	b.WriteString(usageTail)
	io.WriteString(w, b.String())
}

// parseFailed turns an error of fs.Parse into an exit status: --help (or -h)
// prints the usage on stdout and succeeds; a bad flag, which the flag
// package has already reported on stderr, is a usage error with a pointer to
// --help. fs.Usage must print nothing, so that a mistyped flag does not
// bury its one-line error under the whole help.
func parseFailed(err error, fs *flag.FlagSet, stdout, stderr io.Writer) int {
	if errors.Is(err, flag.ErrHelp) {
		printUsage(stdout, fs)
		return exitOK
	}
	if s := flagSuggestion(err, fs); s != "" {
		fmt.Fprintf(stderr, "Did you mean %s?\n", s)
	}
	fmt.Fprintf(stderr, "Run %s --help for usage.\n", fs.Name())
	return exitUsage
}

// flagSuggestion is the defined flag that the undefined one of err is a
// typo of ("--upstream" for --upstrem), or "": a key gets a did-you-mean,
// so does a flag.
func flagSuggestion(err error, fs *flag.FlagSet) string {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: ")
	if !ok {
		return ""
	}
	var known []string
	fs.VisitAll(func(f *flag.Flag) { known = append(known, f.Name) })
	if best := enum.Nearest(strings.TrimLeft(name, "-"), known); best != "" {
		return "--" + best
	}
	return ""
}
