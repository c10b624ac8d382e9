package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// The commands that call a running proxy's admin API (keys, config,
// report) share their flags, how those parse, and how a bad one is told.

// defaultAdminURL is where those commands find the admin listener unless
// --admin says otherwise: admin_listen's default.
const defaultAdminURL = "http://127.0.0.1:9090"

// adminFlagsUsage is how every such command's usage describes its two
// shared flags.
const adminFlagsUsage = `  --admin URL              the proxy's admin listener (default ` + defaultAdminURL + `)
  --token-file FILE        read the admin token from FILE; otherwise it comes
                           from ` + adminTokenEnv + `
`

// adminCommand is one command of the admin API's command line: its flag
// set, with --admin and --token-file defined, and its usage.
type adminCommand struct {
	name      string // what its messages start with: "idempotency-proxy config"
	usage     string
	fs        *flag.FlagSet
	adminURL  *string
	tokenFile *string
}

// newAdminCommand defines the shared flags on a silent flag set named
// flagSet ("config", "keys get"): a command prints its own usage.
func newAdminCommand(name, flagSet, usage string) *adminCommand {
	fs := flag.NewFlagSet(flagSet, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &adminCommand{name: name, usage: usage, fs: fs,
		adminURL: fs.String("admin", defaultAdminURL, ""), tokenFile: fs.String("token-file", "", "")}
}

// run parses args, which take no positional argument, has build make the
// call from the parsed flags, points it at the admin listener, and runs it
// with do. --help prints the usage and succeeds; a bad flag or argument, or
// an error of build, prints the error and the usage: exit status 2.
func (a *adminCommand) run(args, env []string, stderr io.Writer, build func() (*keysCmd, error), do func(*keysCmd) int) int {
	err := a.fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stderr, a.usage)
		return exitOK
	}
	if err != nil {
		err = withSuggestion(err, a.fs)
	}
	if err == nil && a.fs.NArg() > 0 {
		err = fmt.Errorf("unexpected arguments: %v", a.fs.Args())
	}
	var c *keysCmd
	if err == nil {
		c, err = build()
	}
	if err == nil {
		c.name = a.name
		err = c.connect(*a.adminURL, *a.tokenFile, env)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n\n%s", a.name, err, a.usage)
		return exitUsage
	}
	return do(c)
}

// withSuggestion adds to a flag error the defined flag that the undefined
// one is a typo of, if any.
func withSuggestion(err error, fs *flag.FlagSet) error {
	if s := flagSuggestion(err, fs); s != "" {
		return fmt.Errorf("%w; did you mean %s?", err, s)
	}
	return err
}
