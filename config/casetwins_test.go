package config

import (
	"strings"
	"testing"
)

// Keys are case-insensitive, so "ttl" and "TTL" in one mapping are one key
// given twice: YAML refuses a key repeated as written, and the proxy
// refuses it repeated in another case rather than keep one of the two.
func TestKeyGivenTwiceInAnotherCaseIsRefused(t *testing.T) {
	file := writeFile(t, upstreamOnly+"defaults:\n  ttl: 1h\n  TTL: 2h\nroutes:\n  - match: \"POST /a\"\n    Match: \"POST /b\"\n")
	_, err := Load(Source{File: file})
	if err == nil {
		t.Fatal("Load accepted ttl and TTL in one mapping")
	}
	want := file + `:5: defaults.ttl: "TTL" repeats "ttl" of line 4: keys are case-insensitive; keep one`
	if got := strings.Split(err.Error(), "\n")[0]; got != want {
		t.Errorf("problem = %q\nwant      %q", got, want)
	}
	// Apart, in two mappings, they are two keys.
	if _, err := Load(Source{File: writeFile(t, upstreamOnly+"defaults:\n  TTL: 2h\nroutes:\n  - match: \"POST /a\"\n    ttl: 1h\n")}); err != nil {
		t.Errorf("one spelling a mapping: %v", err)
	}
}

// The routes IDEMPOTENCY_PROXY_ROUTES gives are refused the same way, the
// variable named and no line of the file's routes given for it.
func TestKeyGivenTwiceInAnotherCaseInTheRoutesVariableIsRefused(t *testing.T) {
	file := writeFile(t, upstreamOnly+"routes:\n  - match: \"POST /a\"\n    ttl: 1h\n")
	for _, routes := range []string{
		`[{match: "POST /a", ttl: 1h, TTL: 2h}]`,
		`[{"match": "POST /a", "ttl": "1h", "TTL": "2h"}]`,
		"- match: POST /a\n  ttl: 1h\n  TTL: 2h",
	} {
		_, err := Load(Source{File: file, Env: []string{"IDEMPOTENCY_PROXY_ROUTES=" + routes}})
		if err == nil {
			t.Errorf("IDEMPOTENCY_PROXY_ROUTES=%s: Load accepted ttl and TTL in one route", routes)
			continue
		}
		want := `routes[0].ttl: "TTL" repeats "ttl": keys are case-insensitive; keep one (from IDEMPOTENCY_PROXY_ROUTES)`
		if got := err.Error(); got != want {
			t.Errorf("IDEMPOTENCY_PROXY_ROUTES=%s: problem = %q\nwant      %q", routes, got, want)
		}
	}
	// Apart, in two routes, they are two keys.
	if _, err := Load(Source{File: file, Env: []string{`IDEMPOTENCY_PROXY_ROUTES=[{match: "POST /a", TTL: 2h}, {match: "POST /b", ttl: 1h}]`}}); err != nil {
		t.Errorf("one spelling a route: %v", err)
	}
}
