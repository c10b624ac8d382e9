package proxy

import (
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"

	"github.com/idempotency-proxy/idempotency-proxy/internal/pathread"
)

// route is a Route compiled for the request path: the terms its keys
// execute under, and what matching a request and identifying its key need.
type route struct {
	terms
	disabled bool
	// methods are policy.Methods upper-cased: methods are compared
	// upper-cased ("post" is POST).
	methods []string
	// folded is the pattern with its path lower-cased, for path_case:
	// insensitive ("" for the defaults).
	folded string
	// scope is policy.ScopeHeaders with canonical header names.
	scope []ScopeHeader
	// unscoped is scopeHash of a request without scope values: the scope
	// of every request of a route with no scope headers.
	unscoped [16]byte
	// sources are the key sources in force: key_sources or [header:NAME].
	sources []KeySource
	// churn remembers fingerprints for key churn; nil when churn_window
	// is 0.
	churn *churn
}

// terms are all that the files executing a key know of its route: its
// label for logs and metrics, its policy, its metrics and the lookup that
// settles its unknown outcomes. Nothing of how a request matched it or
// where its key came from (TestExecutionKnowsItsRouteOnlyByItsTerms).
type terms struct {
	label   string
	policy  Policy
	metrics *routeMetrics
	// probe is the lookup of unknown outcomes under on_upstream_error:
	// reconcile (nil otherwise), and probeHeaders the canonical names of
	// the headers it copies from the original request.
	probe        *probeTemplate
	probeHeaders []string
	// probeCookies are the cookies of cookie scopes, the only ones of
	// the Cookie header that a lookup carries.
	probeCookies []string
}

func newRoute(label string, disabled bool, p Policy, m *Metrics) *route {
	rt := &route{terms: terms{label: label, policy: p, metrics: m.route(label)}, disabled: disabled, sources: p.sources()}
	if p.Mode == ModeShadow {
		rt.metrics.shadow = m.shadowed(label)
	}
	if p.ChurnWindow > 0 {
		rt.churn = newChurn()
	}
	// Canonical once here rather than on every response: the control
	// header is looked up and removed on each of them, keyed or not.
	rt.policy.UpstreamControlHeader = textproto.CanonicalMIMEHeaderKey(p.UpstreamControlHeader)
	// A replay leaves these out by the record's names, which are canonical.
	rt.policy.ReplayExcludeHeaders = slices.Clone(p.ReplayExcludeHeaders)
	for i, name := range rt.policy.ReplayExcludeHeaders {
		rt.policy.ReplayExcludeHeaders[i] = textproto.CanonicalMIMEHeaderKey(name)
	}
	rt.unscoped = scopeHash(&http.Request{Header: http.Header{}}, nil)
	rt.scope = make([]ScopeHeader, len(p.ScopeHeaders))
	for i, s := range p.ScopeHeaders {
		rt.scope[i] = s.canonical()
	}
	rt.methods = make([]string, len(p.Methods))
	for i, m := range p.Methods {
		rt.methods[i] = upperASCII(m)
	}
	if label != defaultRoute {
		rt.folded = foldPattern(label)
	}
	// A shadow route answers as a plain reverse proxy would, so it never
	// holds an unknown outcome back to settle it: it releases the key.
	if p.OnUpstreamError == UpstreamErrorReconcile && p.Mode != ModeShadow {
		rt.probe, rt.probeHeaders, rt.probeCookies = reconcileProbe(p, rt.scope)
	}
	return rt
}

// protects reports whether rt protects method, upper-cased. A HEAD is
// protected where GET is: Go's ServeMux, Express, Rails and Spring run a
// GET handler for it, side effects included.
func (rt *route) protects(method string) bool {
	return !rt.disabled && (slices.Contains(rt.methods, method) || method == http.MethodHead && slices.Contains(rt.methods, http.MethodGet))
}

// protectsTarget reports whether rt protects a request read as t: its own
// method or the one an override names (the upstream may honour the
// header or not).
func (rt *route) protectsTarget(t *target) bool {
	return rt.protects(t.method) || rt.protects(t.own)
}

func (rt *route) insensitive() bool { return rt.policy.PathCase == PathCaseInsensitive }

// routeTable is an immutable snapshot of the routes; a reload swaps the
// whole table, so a request sees one consistent policy from start to end.
type routeTable struct {
	mux       *http.ServeMux // nil when there are no routes
	byPattern map[string]*route
	// folded holds the folded patterns of the path_case: insensitive
	// routes, nil when there are none.
	folded   *http.ServeMux
	byFolded map[string]*route
	fallback *route
	// methodsMatter is set when a method a POST's _method parameter names
	// could change its route or its protection (methodparam.go), and
	// maxBody is the largest max_request_body of the routes: the most of
	// a form body read for the parameter.
	methodsMatter bool
	maxBody       int64
}

func newRouteTable(def Policy, routes []Route, m *Metrics) (*routeTable, error) {
	if err := def.checkErr(defaultRoute); err != nil {
		return nil, err
	}
	patterns := make([]string, len(routes))
	insensitive := make([]bool, len(routes))
	for i, r := range routes {
		if err := r.Policy.checkErr(r.Pattern); err != nil {
			return nil, err
		}
		patterns[i] = r.Pattern
		insensitive[i] = r.Policy.PathCase == PathCaseInsensitive
	}
	problems := CheckPatterns(patterns)
	if len(problems) == 0 {
		problems = CheckPatternCase(patterns, insensitive)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("invalid route: %s", problems[0].Reason)
	}
	for _, r := range routes {
		if m := UnprotectedMethod(r.Pattern, r.Policy.Methods); m != "" && !r.Disabled {
			return nil, fmt.Errorf("invalid route: route %q matches %s requests alone, and its methods %v protect none: add %s to its methods, or disable it", r.Pattern, m, r.Policy.Methods, m)
		}
	}
	t := &routeTable{
		byPattern: make(map[string]*route, len(routes)),
		fallback:  newRoute(defaultRoute, false, def, m),
		maxBody:   def.MaxRequestBody,
	}
	if len(routes) == 0 {
		t.methodsMatter = methodsMatter(nil, t.fallback)
		return t, nil
	}
	// CheckPatterns and CheckPatternCase asked a ServeMux about every
	// pair: none of these panics.
	t.mux = http.NewServeMux()
	all := []*route{t.fallback}
	for _, r := range routes {
		rt := newRoute(r.Pattern, r.Disabled, r.Policy, m)
		all = append(all, rt)
		t.maxBody = max(t.maxBody, r.Policy.MaxRequestBody)
		t.byPattern[r.Pattern] = rt
		t.mux.Handle(r.Pattern, http.NotFoundHandler())
		if rt.insensitive() {
			if t.folded == nil {
				t.folded, t.byFolded = http.NewServeMux(), map[string]*route{}
			}
			t.byFolded[rt.folded] = rt
			t.folded.Handle(rt.folded, http.NotFoundHandler())
		}
	}
	t.methodsMatter = methodsMatter(patterns, all...)
	return t, nil
}

// byLabel returns the route labelled label, nil when there is none now.
func (tb *routeTable) byLabel(label string) *route {
	if label == defaultRoute {
		return tb.fallback
	}
	return tb.byPattern[label]
}

// match returns the route of r read as t — the most specific matching
// pattern, or the defaults — and sets t.refuse when r must be refused
// instead: its method-override headers name more than one method and one
// of its readings is protected, or its path can be read two ways and one
// of them is protected by a route that rejects ambiguous paths.
func (tb *routeTable) match(r *http.Request, t *target) *route {
	rt, routed := tb.lookupSpelling(r, t.method, t)
	if t.method != t.own && !rt.protects(t.method) {
		// The upstream may ignore the override: as its own method the
		// request may fall on a route that protects it (POST with an
		// override naming GET is still a POST to such an upstream).
		if own, p := tb.lookupSpelling(r, t.own, t); own.protects(t.own) {
			rt, routed = own, p
		}
	}
	t.routed = routed
	if t.overrides != overrideNone && tb.anyReadingProtected(r, t) {
		t.refuse = failAmbiguousMethod
		return rt
	}
	if !t.odd {
		return rt
	}
	if rt.protectsTarget(t) && rt.policy.AmbiguousPaths == AmbiguousReject {
		t.refuse = failAmbiguousPath
		return rt
	}
	// The other reading may name another route: a path that is
	// unprotected as sent may be a protected one to the upstream.
	if other := tb.lookup(r, t.method, pathread.Split(t.escaped), t.escaped); other.protectsTarget(t) && other.policy.AmbiguousPaths == AmbiguousReject {
		t.refuse = failAmbiguousPath
	}
	return rt
}

// anyReadingProtected reports whether a route protects r read as t with
// its own method or with any method its override headers name: each is
// the method some upstream applies.
func (tb *routeTable) anyReadingProtected(r *http.Request, t *target) bool {
	if own, _ := tb.lookupSpelling(r, t.own, t); own.protects(t.own) {
		return true
	}
	for _, m := range t.named {
		if rt, _ := tb.lookupSpelling(r, m, t); rt.protects(m) {
			return true
		}
	}
	return false
}

// lookupSpelling returns the route of r read as t with method, and the
// path it matched. That is t's path, unless another route's pattern is
// more specific for one of the spellings upstreams route to it: the path
// without its trailing slashes, on a route with trailing_slash: same
// (Express, ASP.NET Core, Spring MVC before 6), or without a format
// suffix, as Rails routes /v1/charges.json to /v1/charges — also before
// trailing slashes, which Rails strips first (/v1/charges.json/). Such a
// route is taken only when it protects method: giving a protected route
// every spelling of its path costs a key where an upstream reads another
// path, never an unprotected execution where it reads this one.
//
// A path whose suffix a parameter or wildcard took (/v1/charges/ch_1.json
// on POST /v1/charges/{id}) is on the same route either way, and matched
// as the path without the suffix, which Rails routes alike: its payload
// key is the one of /v1/charges/ch_1, never a second execution.
func (tb *routeTable) lookupSpelling(r *http.Request, method string, t *target) (*route, string) {
	rt := tb.lookup(r, method, t.path, t.escaped)
	if tb.mux == nil {
		return rt, t.path
	}
	routed := t.path
	trimmed := strings.TrimRight(t.path, "/")
	slashed := trimmed != t.path && trimmed != ""
	if slashed {
		if other := tb.lookup(r, method, trimmed, t.escaped); tb.moreSpecific(other, rt) && other.protects(method) && other.policy.TrailingSlash == TrailingSlashSame {
			rt, routed = other, trimmed
		}
	}
	// A path ending in "/" has no suffix as sent: only trimmed can.
	p, ok := pathread.WithoutFormatSuffix(t.path)
	if !ok && slashed {
		p, ok = pathread.WithoutFormatSuffix(trimmed)
	}
	if !ok {
		return rt, routed
	}
	other := tb.lookup(r, method, p, t.escaped)
	switch {
	case other == rt && rt != tb.fallback && rt.protects(method):
		return rt, p
	case tb.moreSpecific(other, rt) && other.protects(method) && (!slashed || other.policy.TrailingSlash == TrailingSlashSame):
		return other, p
	}
	return rt, routed
}

// moreSpecific reports whether the route a spelling matched, other, is
// more specific than rt, the one the path as sent matched: rt is the
// defaults, or a pattern with a shorter path (a subtree, /v1/, or a
// wildcard, /v1/{rest...}). A route for the spelling itself
// (POST /v1/charges/ beside POST /v1/charges) is as long and keeps it.
func (tb *routeTable) moreSpecific(other, rt *route) bool {
	if other == tb.fallback || other == rt {
		return false
	}
	return rt == tb.fallback || len(patternPath(other.label)) > len(patternPath(rt.label))
}

// patternPath is the path of a route pattern, without its method, host
// and trailing slash: "/v1/charges" for "POST shop.example/v1/charges/".
func patternPath(pattern string) string {
	if i := strings.IndexByte(pattern, ' '); i >= 0 {
		pattern = strings.TrimLeft(pattern[i:], " \t")
	}
	if i := strings.IndexByte(pattern, '/'); i >= 0 {
		pattern = pattern[i:]
	}
	return strings.TrimRight(pattern, "/")
}

// lookup returns the route of a request like r with method and the
// escaped path (sent is r's, as sent): the most specific matching pattern, or the defaults.
// Hosts match lower-cased and without a trailing dot, as they are
// fingerprinted: "A.EXAMPLE" and "a.example." are a.example, and must not
// slip past a route that requires a key there. It allocates only for a
// request it reads differently from how net/http parsed it.
func (tb *routeTable) lookup(r *http.Request, method, escaped, sent string) *route {
	if tb.mux == nil {
		return tb.fallback
	}
	host := normalHost(r.Host)
	if host != r.Host || method != r.Method || escaped != sent {
		norm := *r
		norm.Host, norm.Method, norm.URL = host, method, withPath(r.URL, escaped)
		r = &norm
	}
	_, pattern := tb.mux.Handler(r)
	rt, ok := tb.byPattern[pattern]
	if !ok {
		rt = tb.fallback
	}
	if tb.folded == nil {
		return rt
	}
	// path_case: insensitive routes match the lower-cased path with
	// their folded patterns. The more specific of the two matches wins,
	// compared folded, as the upstream compares.
	lower := r
	if l := lowerASCII(escaped); l != escaped {
		c := *r
		c.URL = withPath(r.URL, l)
		lower = &c
	}
	_, folded := tb.folded.Handler(lower)
	ins, ok := tb.byFolded[folded]
	switch {
	case !ok || ins == rt:
		return rt
	case rt == tb.fallback:
		return ins
	}
	// Both match; the configuration checked that their folded patterns
	// do not conflict, so one is more specific.
	pair := http.NewServeMux()
	pair.Handle(rt.folded, http.NotFoundHandler())
	pair.Handle(ins.folded, http.NotFoundHandler())
	if _, p := pair.Handler(lower); p == rt.folded {
		return rt
	}
	return ins
}

// withPath returns a copy of u whose escaped path is escaped.
func withPath(u *url.URL, escaped string) *url.URL {
	out := *u
	out.RawPath = escaped
	if p, err := url.PathUnescape(escaped); err == nil {
		out.Path = p
	}
	return &out
}
