package proxy

import (
	"fmt"
	"net/http"
	"slices"
)

// route is a Route compiled for the request path.
type route struct {
	label    string
	disabled bool
	policy   Policy
	metrics  *routeMetrics
	// scope is policy.ScopeHeaders parsed once ("Cookie:NAME" entries).
	scope []scopePart
	// sources are the key sources in force: key_sources or [header:NAME].
	sources []KeySource
}

func newRoute(label string, disabled bool, p Policy, m *Metrics) *route {
	return &route{label: label, disabled: disabled, policy: p, metrics: m.route(label), scope: parseScope(p.ScopeHeaders), sources: p.sources()}
}

func (rt *route) protects(method string) bool {
	return !rt.disabled && slices.Contains(rt.policy.Methods, method)
}

func (rt *route) releases(status int) bool {
	return slices.Contains(rt.policy.ReleaseStatuses, status)
}

// routeTable is an immutable snapshot of the routes; a reload swaps the
// whole table, so a request sees one consistent policy from start to end.
type routeTable struct {
	mux       *http.ServeMux // nil when there are no routes
	byPattern map[string]*route
	fallback  *route
}

func newRouteTable(def Policy, routes []Route, m *Metrics) (*routeTable, error) {
	if err := def.checkErr(defaultRoute); err != nil {
		return nil, err
	}
	patterns := make([]string, len(routes))
	for i, r := range routes {
		if err := r.Policy.checkErr(r.Pattern); err != nil {
			return nil, err
		}
		patterns[i] = r.Pattern
	}
	if problems := CheckPatterns(patterns); len(problems) > 0 {
		return nil, fmt.Errorf("invalid route: %s", problems[0].Reason)
	}
	t := &routeTable{
		byPattern: make(map[string]*route, len(routes)),
		fallback:  newRoute(defaultRoute, false, def, m),
	}
	if len(routes) == 0 {
		return t, nil
	}
	// CheckPatterns asked a ServeMux about every pair: none of these panics.
	t.mux = http.NewServeMux()
	for _, r := range routes {
		t.byPattern[r.Pattern] = newRoute(r.Pattern, r.Disabled, r.Policy, m)
		t.mux.Handle(r.Pattern, http.NotFoundHandler())
	}
	return t, nil
}

// match returns the route of r: the most specific matching pattern, or the
// defaults. Hosts match lower-cased and without a trailing dot, as they are
// fingerprinted: "A.EXAMPLE" and "a.example." are a.example, and must not
// slip past a route that requires a key there.
func (t *routeTable) match(r *http.Request) *route {
	if t.mux == nil {
		return t.fallback
	}
	if host := normalHost(r.Host); host != r.Host {
		norm := *r
		norm.Host = host
		r = &norm
	}
	_, pattern := t.mux.Handler(r)
	if rt, ok := t.byPattern[pattern]; ok {
		return rt
	}
	return t.fallback
}
