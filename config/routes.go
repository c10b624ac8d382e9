package config

import (
	"fmt"
	"net/http"
	"strings"
)

// checkPatterns reports route patterns that are missing, repeated, rejected
// by http.ServeMux, or in conflict with an earlier route. The proxy
// registers every route (disabled ones too) on a ServeMux, so asking a
// ServeMux is the only check that cannot drift from what happens at startup.
func checkPatterns(routes []Route) []*Problem {
	var out []*Problem
	add := func(i int, format string, args ...any) {
		out = append(out, &Problem{Path: fmt.Sprintf("routes[%d].match", i), Reason: fmt.Sprintf(format, args...)})
	}
	valid := make([]bool, len(routes))
	first := map[string]int{}
	for i, r := range routes {
		if r.Match == "" {
			add(i, "required (a ServeMux pattern such as \"POST /v1/charges\" or \"/v1/\")")
			continue
		}
		if j, dup := first[r.Match]; dup {
			add(i, "duplicate of routes[%d]", j)
			continue
		}
		first[r.Match] = i
		if err := register(r.Match); err != nil {
			add(i, "%s", err)
			continue
		}
		valid[i] = true
		for j := range i {
			if !valid[j] {
				continue
			}
			if err := register(routes[j].Match, r.Match); err != nil {
				add(i, "pattern %q conflicts with routes[%d] %q: %s", r.Match, j, routes[j].Match, conflictReason(err))
				valid[i] = false // report each pattern's first conflict only
				break
			}
		}
	}
	return out
}

// register adds patterns to a fresh ServeMux, turning its panic into an error.
func register(patterns ...string) (err error) {
	// "GET example.com /x" would be read as method GET and a host with a
	// blank in it, which can never match: reject more than method + path.
	last := patterns[len(patterns)-1]
	if len(strings.Fields(last)) > 2 {
		return fmt.Errorf("invalid pattern %q (want [METHOD ][HOST]/PATH)", last)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("invalid pattern %q: %s", last, strings.TrimPrefix(fmt.Sprint(r), fmt.Sprintf("parsing %q: ", last)))
		}
	}()
	mux := http.NewServeMux()
	for _, p := range patterns {
		mux.Handle(p, http.NotFoundHandler())
	}
	return nil
}

// conflictReason keeps ServeMux's explanation of a conflict and drops its
// "registered at file:line" locations, which point into this package.
func conflictReason(err error) string {
	msg := err.Error()
	if _, after, ok := strings.Cut(msg, ":\n"); ok {
		msg = after
	}
	return strings.ReplaceAll(msg, "\n", " ")
}
