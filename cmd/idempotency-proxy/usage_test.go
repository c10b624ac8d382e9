package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/config"
)

// A newcomer's first command is --help: it must answer on stdout, exit 0,
// and name every flag, the environment scheme, the example configuration,
// the other commands, the docs (that exist) and the exit statuses.
func TestHelpNamesFlagsEnvironmentDocsAndExitStatuses(t *testing.T) {
	for _, arg := range []string{"--help", "-h"} {
		t.Run(arg, func(t *testing.T) {
			code, out, errs := runBinary(t, nil, arg)
			if code != exitOK || errs != "" {
				t.Fatalf("exit %d, stderr %q; want 0 and nothing on stderr", code, errs)
			}
			want := []string{
				"--config FILE", "--validate", "--version", "--check",
				"keys get|delete|list|find|hash",
				"IDEMPOTENCY_PROXY_ + the key path", "IDEMPOTENCY_PROXY_UPSTREAM_URL=",
				"config.example.yaml", "docs/configuration.md", "docs/operating.md",
				":8080", ":9090", "/metrics", "/readyz",
			}
			for flagName := range config.Flags() { // each defined, with its help
				want = append(want, "\n  --"+flagName+" ")
			}
			for status, meaning := range map[int]string{exitOK: "success", exitFailure: "runtime failure", exitUsage: "invalid configuration or usage"} {
				want = append(want, fmt.Sprintf("\n  %d  %s", status, meaning))
			}
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("--help lacks %q", w)
				}
			}
			// Every file the help sends a reader to exists in the repository.
			for _, path := range regexp.MustCompile(`\b(?:docs/[a-z0-9-]+\.md|README\.md|config\.example\.yaml)\b`).FindAllString(out, -1) {
				if _, err := os.Stat(filepath.Join("..", "..", path)); err != nil {
					t.Errorf("--help names %s: %v", path, err)
				}
			}
			if t.Failed() {
				t.Logf("--help:\n%s", out)
			}
		})
	}
}

// A mistyped flag gets its one-line error and a pointer to --help, not the
// whole help text, and the usage exit status.
func TestBadFlagPointsToHelp(t *testing.T) {
	code, out, errs := runBinary(t, nil, "--upstreem", "http://127.0.0.1:3000")
	if code != exitUsage {
		t.Errorf("exit %d, want %d", code, exitUsage)
	}
	if out != "" {
		t.Errorf("stdout %q, want nothing", out)
	}
	if !strings.Contains(errs, "upstreem") || !strings.Contains(errs, "--help") || strings.Contains(errs, "Exit status") {
		t.Errorf("stderr %q, want the bad flag named and a pointer to --help, without the whole help", errs)
	}
}

// A mistyped flag is named with the flag it is a typo of, as a mistyped
// key is; one that is no typo gets no guess.
func TestMistypedFlagGetsADidYouMean(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--upstrem", "http://127.0.0.1:3000"}, "Did you mean --upstream?\n"},
		{[]string{"--postgres-ulr", "postgres://x"}, "Did you mean --postgres-url?\n"},
		{[]string{"keys", "list", "--limt", "5"}, "did you mean --limit?"},
		{[]string{"config", "--admn", "http://127.0.0.1:9090"}, "did you mean --admin?"},
	} {
		code, _, errs := runBinary(t, nil, tc.args...)
		if code != exitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errs, exitUsage, tc.want)
		}
	}
	if _, _, errs := runBinary(t, nil, "--frobnicate"); strings.Contains(strings.ToLower(errs), "did you mean") {
		t.Errorf("--frobnicate: stderr %q, want no guess", errs)
	}
}
