package proxy

import (
	"fmt"
	"net/http"
	"strings"
)

// PatternProblem is a route pattern the handler cannot serve.
type PatternProblem struct {
	// Index is the route's position in the list given to CheckPatterns.
	Index  int
	Reason string
}

// CheckPatterns reports route patterns that are missing, repeated, rejected
// by http.ServeMux, or in conflict with an earlier route: each route's first
// problem only. The handler registers every route (disabled ones too) on a
// ServeMux, so asking a ServeMux is the check that cannot drift from what
// New does. It is the one check of the patterns, for the configuration and
// New alike.
func CheckPatterns(patterns []string) []PatternProblem {
	var out []PatternProblem
	add := func(i int, format string, args ...any) {
		out = append(out, PatternProblem{Index: i, Reason: fmt.Sprintf(format, args...)})
	}
	valid := make([]bool, len(patterns))
	first := map[string]int{}
	for i, p := range patterns {
		if p == "" {
			add(i, "required (a ServeMux pattern such as \"POST /v1/charges\" or \"/v1/\")")
			continue
		}
		if j, dup := first[p]; dup {
			add(i, "duplicate of routes[%d]", j)
			continue
		}
		first[p] = i
		if err := register(p); err != nil {
			add(i, "%s", err)
			continue
		}
		if f := strings.Fields(p); len(f) == 2 && f[0] != strings.ToUpper(f[0]) {
			// Requests are matched with their method upper-cased: ServeMux
			// would match "post" literally, so the route would be dead.
			add(i, "method %q of %q matches no request: requests are matched with their method upper-cased; write %q", f[0], p, strings.ToUpper(f[0])+" "+f[1])
			continue
		}
		valid[i] = true
		for j := range i {
			if !valid[j] {
				continue
			}
			if err := register(patterns[j], p); err != nil {
				add(i, "pattern %q conflicts with routes[%d] %q: %s", p, j, patterns[j], conflictReason(err))
				valid[i] = false
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

// UnprotectedMethod returns the method a route pattern names when a route
// with that pattern and methods would protect none of the requests it
// matches ("" otherwise): "POST /v1/charges" with methods [PUT PATCH]
// matches POSTs alone, and passes every one through. A pattern naming GET
// also matches HEAD, which a route protecting HEAD protects.
func UnprotectedMethod(pattern string, methods []string) string {
	f := strings.Fields(pattern)
	if len(f) != 2 {
		return ""
	}
	rt := &route{methods: make([]string, len(methods))}
	for i, m := range methods {
		rt.methods[i] = upperASCII(m)
	}
	method := upperASCII(f[0])
	if rt.protects(method) || method == http.MethodGet && rt.protects(http.MethodHead) {
		return ""
	}
	return method
}

// PatternPath is the path of a route pattern, "[METHOD ][HOST]/PATH",
// wildcards and all: "/v1/charges/{id}" of "POST api.example.com/v1/charges/{id}".
func PatternPath(p string) string {
	fields := strings.Fields(p)
	if len(fields) == 0 {
		return ""
	}
	hostPath := fields[len(fields)-1]
	if i := strings.IndexByte(hostPath, '/'); i >= 0 {
		return hostPath[i:]
	}
	return ""
}

// foldPattern is a route pattern with its host and path lower-cased, the
// method kept: "POST /V1/Charges" is "POST /v1/charges".
func foldPattern(p string) string {
	if method, rest, ok := strings.Cut(p, " "); ok {
		return method + " " + strings.ToLower(strings.TrimLeft(rest, " \t"))
	}
	return strings.ToLower(p)
}

// CheckPatternCase reports routes that path_case: insensitive makes
// indistinct: an insensitive route's pattern, lower-cased, must be neither
// equal to nor in conflict with any other route's lower-cased pattern,
// since both could match one request with neither more specific. Run it
// on patterns CheckPatterns accepted; insensitive[i] is routes[i]'s
// path_case.
func CheckPatternCase(patterns []string, insensitive []bool) []PatternProblem {
	var out []PatternProblem
	for i, p := range patterns {
		if !insensitive[i] {
			continue
		}
		fi := foldPattern(p)
		if err := register(fi); err != nil {
			out = append(out, PatternProblem{Index: i, Reason: fmt.Sprintf("pattern %q lower-cased for path_case insensitive: %s", p, err)})
			continue
		}
		for j, other := range patterns {
			if j == i || insensitive[j] && j < i {
				continue // a pair of insensitive routes is checked once
			}
			fj := foldPattern(other)
			if fi == fj {
				out = append(out, PatternProblem{Index: i, Reason: fmt.Sprintf("pattern %q is routes[%d] %q but for case, which path_case insensitive cannot tell apart", p, j, other)})
				break
			}
			if err := register(fj, fi); err != nil {
				out = append(out, PatternProblem{Index: i, Reason: fmt.Sprintf("pattern %q conflicts with routes[%d] %q when compared without case (path_case insensitive): %s", p, j, other, conflictReason(err))})
				break
			}
		}
	}
	return out
}
