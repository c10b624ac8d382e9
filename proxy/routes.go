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

func newRouteTable(def Policy, routes []Route, m *Metrics) (t *routeTable, err error) {
	if err := checkPolicy(defaultRoute, def); err != nil {
		return nil, err
	}
	for _, r := range routes {
		if err := checkPolicy(r.Pattern, r.Policy); err != nil {
			return nil, err
		}
	}
	t = &routeTable{
		byPattern: make(map[string]*route, len(routes)),
		fallback:  &route{label: defaultRoute, policy: def, metrics: m.route(defaultRoute), scope: parseScope(def.ScopeHeaders)},
	}
	if len(routes) == 0 {
		return t, nil
	}
	t.mux = http.NewServeMux()
	// ServeMux panics on invalid or conflicting patterns; config validation
	// reports those with their key path, this keeps a bad table from
	// crashing the process.
	defer func() {
		if p := recover(); p != nil {
			t, err = nil, fmt.Errorf("invalid route: %v", p)
		}
	}()
	for _, r := range routes {
		if _, dup := t.byPattern[r.Pattern]; dup {
			return nil, fmt.Errorf("invalid route: pattern %q appears twice", r.Pattern)
		}
		t.byPattern[r.Pattern] = &route{label: r.Pattern, disabled: r.Disabled, policy: r.Policy, metrics: m.route(r.Pattern), scope: parseScope(r.Policy.ScopeHeaders)}
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

// checkPolicy rejects policies the handler cannot run. Package config
// reports these with their key paths; this guards other callers.
func checkPolicy(label string, p Policy) error {
	switch {
	case p.Header == "":
		return fmt.Errorf("route %s: no key header", label)
	case p.TTL <= 0 || p.LockTTL <= 0:
		return fmt.Errorf("route %s: ttl and lock_ttl must be positive", label)
	case p.LockTTL > p.TTL:
		return fmt.Errorf("route %s: lock_ttl exceeds ttl", label)
	case p.Concurrent == Wait && p.WaitTimeout <= 0:
		return fmt.Errorf("route %s: wait_timeout must be positive", label)
	}
	return nil
}
