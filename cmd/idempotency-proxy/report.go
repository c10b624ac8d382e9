package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/idempotency-proxy/idempotency-proxy/internal/adoption"
	"io"
	"net/http"
	"net/url"
	"text/tabwriter"
	"time"
)

const reportUsage = `Usage: idempotency-proxy report [--window 24h] [--json] [--admin URL] [--token-file FILE]

Prints the adoption report of a running proxy (GET /admin/report): per route,
the requests, the share that carry a key, the duplicates that were replayed
(enforce) or would have been (shadow) and so the upstream executions saved or
that would be saved, mismatches, conflicts, missing keys, key churn and the
scopes that churn most, by hash. The counts are that one process's since it
started, at most 24h back; a fleet reads Prometheus (docs/operating.md).

Flags:
  --window D               how far back to count (default 24h)
  --json                   the report as JSON instead of a table
` + adminFlagsUsage + `
Exit status: 0 success, 1 failed call, 2 bad usage.
`

// runReport runs `idempotency-proxy report`.
func runReport(args, env []string, stdout, stderr io.Writer) int {
	a := newAdminCommand("idempotency-proxy report", "report", reportUsage)
	window := a.fs.Duration("window", 24*time.Hour, "")
	asJSON := a.fs.Bool("json", false, "")
	return a.run(args, env, stderr, func() (*keysCmd, error) {
		if *window <= 0 {
			return nil, fmt.Errorf("--window: want a positive duration such as 1h, got %s", *window)
		}
		if *window < adoption.Bucket {
			return nil, fmt.Errorf("--window: counts are kept per minute, so the smallest window is %s, got %s", adoption.Bucket, *window)
		}
		return &keysCmd{method: http.MethodGet, path: "/admin/report?" + url.Values{"window": {window.String()}}.Encode()}, nil
	}, func(c *keysCmd) int { return printReport(c, *asJSON, stdout, stderr) })
}

// printReport fetches the report and prints it, as JSON or as a table.
func printReport(c *keysCmd, asJSON bool, stdout, stderr io.Writer) int {
	body, code := c.fetch(stderr)
	if code != exitOK {
		return code
	}
	if asJSON {
		var out bytes.Buffer
		if err := json.Indent(&out, body, "", "  "); err != nil {
			fmt.Fprintf(stderr, "%s: reading the answer: %v\n", c.name, err)
			return exitFailure
		}
		stdout.Write(append(bytes.TrimSpace(out.Bytes()), '\n'))
		return exitOK
	}
	var r adoption.Report
	if err := json.Unmarshal(body, &r); err != nil {
		fmt.Fprintf(stderr, "%s: reading the answer: %v\n", c.name, err)
		return exitFailure
	}
	writeReportTable(stdout, r)
	return exitOK
}

// writeReportTable prints r for people: what it covers, a line a route,
// then each route's most churning scopes.
func writeReportTable(w io.Writer, r adoption.Report) {
	fmt.Fprintf(w, "Adoption report: %s.\n", r.Scope)
	fmt.Fprintf(w, "Window %s: covers %s since %s.\n", r.Window, r.Covered, r.Since.Format(time.RFC3339))
	if r.Note != "" {
		fmt.Fprintf(w, "Note: %s.\n", r.Note)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUTE\tMODE\tREQUESTS\tKEYED\tDUPLICATES\tEXECUTIONS SAVED\tWOULD SAVE\tMISMATCHES\tCONFLICTS\tMISSING KEYS\tKEY CHURN")
	for _, rt := range r.Routes {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d (%.0f%%)\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", rt.Route, rt.Mode, rt.Requests,
			rt.Keyed, 100*rt.KeyedShare, rt.Duplicates, rt.ExecutionsSaved, rt.ExecutionsWouldBe,
			rt.Mismatches, rt.Conflicts, rt.MissingKeys, rt.Churn)
	}
	tw.Flush()
	header := false
	for _, rt := range r.Routes {
		for _, s := range rt.TopChurnScopes {
			if !header {
				fmt.Fprint(w, "\nMost churning scopes (since the process started):\n")
				fmt.Fprintln(tw, "ROUTE\tSCOPE HASH\tKEY CHURN")
				header = true
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\n", rt.Route, s.ScopeHash, s.Churn)
		}
	}
	tw.Flush()
}
