package main

import (
	"io"
	"net/http"
)

const configUsage = `Usage: idempotency-proxy config [--admin URL] [--token-file FILE]

Prints the effective configuration of a running proxy (GET /admin/config) as
YAML: every key, a comment with where its value came from (flag, env, file,
default, or defaults for a route's inherited value), secrets masked; a key
whose change waits for a restart says so, with the value still in force.

Flags:
` + adminFlagsUsage + `
Exit status: 0 success, 1 failed call, 2 bad usage.
`

// runConfigView runs `idempotency-proxy config`.
func runConfigView(args, env []string, stdout, stderr io.Writer) int {
	a := newAdminCommand("idempotency-proxy config", "config", configUsage)
	return a.run(args, env, stderr, func() (*keysCmd, error) {
		return &keysCmd{method: http.MethodGet, path: "/admin/config"}, nil
	}, func(c *keysCmd) int { return c.run(stdout, stderr) })
}
