package config

import (
	"slices"
	"strings"
	"testing"
)

// A route matches only requests of the method its match names; if its
// methods do not protect that method, it passes every request it matches
// through, require_key or not. Such a route is refused, saying what to
// add, unless it is disabled; from IDEMPOTENCY_PROXY_ROUTES it names the
// variable.
func TestRouteWhoseMethodsMissItsMatchsMethodIsRefused(t *testing.T) {
	file := writeFile(t, upstreamOnly+"defaults:\n  methods: [PUT, PATCH]\nroutes:\n  - match: \"POST /v1/charges\"\n    require_key: true\n")
	got := problemLines(t, Source{File: file})
	want := []string{`routes[0].match: route "POST /v1/charges" matches POST requests alone, and its methods [PUT PATCH] (from defaults) protect none: add POST to its methods, or set enabled: false for a plain pass-through`}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	got = problemLines(t, Source{File: file, Env: []string{`IDEMPOTENCY_PROXY_ROUTES=[{match: "POST /a", methods: [PUT]}, {match: "POST /b"}]`}})
	want = []string{
		`routes[0].methods: route "POST /a" matches POST requests alone, and its methods [PUT] protect none: add POST to its methods, or set enabled: false for a plain pass-through (from IDEMPOTENCY_PROXY_ROUTES)`,
		`routes[1].match: route "POST /b" matches POST requests alone, and its methods [PUT PATCH] (from defaults) protect none: add POST to its methods, or set enabled: false for a plain pass-through (from IDEMPOTENCY_PROXY_ROUTES)`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("from IDEMPOTENCY_PROXY_ROUTES, problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	for _, routes := range []string{
		`[{match: "POST /a", enabled: false}]`,
		`[{match: "POST /a", methods: [post]}]`,
		`[{match: "GET /a", methods: [HEAD]}]`,
		`[{match: "HEAD /a", methods: [GET]}]`,
		`[{match: "/a"}]`,
	} {
		if _, err := Load(Source{File: file, Env: []string{"IDEMPOTENCY_PROXY_ROUTES=" + routes}}); err != nil {
			t.Errorf("IDEMPOTENCY_PROXY_ROUTES=%s: %v", routes, err)
		}
	}
}
