package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
)

const configUsage = `Usage: idempotency-proxy config [--admin URL] [--token-file FILE]

Prints the effective configuration of a running proxy (GET /admin/config) as
YAML: every key, a comment with where its value came from (flag, env, file,
default, or defaults for a route's inherited value), secrets masked; a key
whose change waits for a restart says so, with the value still in force.

Flags:
  --admin URL              the proxy's admin listener (default http://127.0.0.1:9090)
  --token-file FILE        read the admin token from FILE; otherwise it comes
                           from ` + adminTokenEnv + `

Exit status: 0 success, 1 failed call, 2 bad usage.
`

// runConfigView runs `idempotency-proxy config`.
func runConfigView(args, env []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("config", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	adminURL := fs.String("admin", "http://127.0.0.1:9090", "")
	tokenFile := fs.String("token-file", "", "")
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stderr, configUsage)
		return exitOK
	}
	if err != nil {
		if s := flagSuggestion(err, fs); s != "" {
			err = fmt.Errorf("%w; did you mean %s?", err, s)
		}
	}
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	c := &keysCmd{name: "idempotency-proxy config", method: http.MethodGet, path: "/admin/config"}
	if err == nil {
		err = c.connect(*adminURL, *tokenFile, env)
	}
	if err != nil {
		fmt.Fprintf(stderr, "idempotency-proxy config: %v\n\n%s", err, configUsage)
		return exitUsage
	}
	return c.run(stdout, stderr)
}
