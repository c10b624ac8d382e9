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
	if err := def.checkErr(DefaultRoute); err != nil {
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
		fallback:  &route{label: DefaultRoute, policy: def, metrics: m.route(DefaultRoute)},
	}
	if len(routes) == 0 {
		return t, nil
	}
	// CheckPatterns asked a ServeMux about every pair: none of these panics.
	t.mux = http.NewServeMux()
	for _, r := range routes {
		t.byPattern[r.Pattern] = &route{label: r.Pattern, disabled: r.Disabled, policy: r.Policy, metrics: m.route(r.Pattern)}
		t.mux.Handle(r.Pattern, http.NotFoundHandler())
	}
	return t, nil
}

// match returns the route of r: the most specific matching pattern, or the
// defaults.
func (t *routeTable) match(r *http.Request) *route {
	if t.mux == nil {
		return t.fallback
	}
	_, pattern := t.mux.Handler(r)
	if rt, ok := t.byPattern[pattern]; ok {
		return rt
	}
	return t.fallback
}
