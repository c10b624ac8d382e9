package proxy

import (
	"net/http"
	"strings"
	"testing"
)

// chargesRoutes is the configuration of docs/request-handling.md: a route
// that requires a key, and a disabled one.
func chargesRoutes(charges func(*Policy)) envOption {
	return func(o *Options) {
		p := DefaultPolicy()
		p.RequireKey = true
		if charges != nil {
			charges(&p)
		}
		o.Routes = []Route{
			{Pattern: "POST /v1/charges", Policy: p},
			{Pattern: "/internal/", Disabled: true, Policy: DefaultPolicy()},
		}
	}
}

// rawRequest renders a request with a JSON body and no key; target and
// method as given, extra header lines after.
func rawRequest(method, target string, extra ...string) string {
	var b strings.Builder
	b.WriteString(method + " " + target + " HTTP/1.1\r\nHost: h.example\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n")
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n{}")
	return b.String()
}

// Every spelling of a route's path and method gets that route's policy:
// decoded unreserved characters, dot segments (encoded too, out of a
// disabled route), repeated slashes, a lower-case method, a method
// override. Spellings an upstream may read as another path are refused.
func TestEverySpellingOfARouteGetsItsPolicy(t *testing.T) {
	e := newEnv(t, nil, chargesRoutes(nil))
	// Every spelling of the override headers: more header names than
	// there are spellings, which are then looked up one by one.
	every := make([]string, 0, len(methodOverrideHeaders))
	for _, name := range methodOverrideHeaders {
		every = append(every, name+": POST")
	}
	for _, c := range []struct {
		name, method, target string
		extra                []string
		want                 string // problem type
	}{
		{"as written", "POST", "/v1/charges", nil, "missing-key"},
		{"an encoded unreserved character", "POST", "/v1/%63harges", nil, "missing-key"},
		{"an encoded dot segment out of a disabled route", "POST", "/internal/%2e%2e/v1/charges", nil, "missing-key"},
		{"dot segments", "POST", "/v1/./x/../charges", nil, "missing-key"},
		{"a repeated slash", "POST", "/v1//charges", nil, "missing-key"},
		{"a lower-case method", "post", "/v1/charges", nil, "missing-key"},
		{"a method override", "GET", "/v1/charges", []string{"X-HTTP-Method-Override: POST"}, "missing-key"},
		{"X-HTTP-Method", "PUT", "/v1/charges", []string{"X-HTTP-Method: post"}, "missing-key"},
		{"X-Method-Override", "GET", "/v1/charges", []string{"X-Method-Override: POST"}, "missing-key"},
		{"an override naming an unprotected method", "POST", "/v1/charges", []string{"X-HTTP-Method-Override: GET"}, "missing-key"},
		{"an override with underscores", "GET", "/v1/charges", []string{"X_HTTP_METHOD_OVERRIDE: POST"}, "missing-key"},
		{"an override with one underscore", "GET", "/v1/charges", []string{"X-HTTP-Method_Override: POST"}, "missing-key"},
		{"X_METHOD_OVERRIDE", "GET", "/v1/charges", []string{"X_METHOD_OVERRIDE: POST"}, "missing-key"},
		{"X_HTTP_METHOD", "GET", "/v1/charges", []string{"x_http_method: post"}, "missing-key"},
		{"every spelling of the overrides, naming one method", "GET", "/v1/charges", every, "missing-key"},
		{"overrides with hyphens and underscores naming two methods", "GET", "/v1/charges", []string{"X-HTTP-Method-Override: GET", "X_HTTP_METHOD_OVERRIDE: POST"}, "ambiguous-method"},
		{"a trailing slash", "POST", "/v1/charges/", nil, "missing-key"},
		{"two trailing slashes", "POST", "/v1/charges//", nil, "missing-key"},
		{"a trailing slash and a query", "POST", "/v1/charges/?x=1", nil, "missing-key"},
		{"a format suffix", "POST", "/v1/charges.json", nil, "missing-key"},
		{"a format suffix then a trailing slash", "POST", "/v1/charges.json/", nil, "missing-key"},
		{"a format suffix then two trailing slashes", "POST", "/v1/charges.json//", nil, "missing-key"},
		{"an encoded trailing space", "POST", "/v1/charges%20", nil, "ambiguous-path"},
		{"an encoded trailing tab", "POST", "/v1/charges%09", nil, "ambiguous-path"},
		{"an encoded path parameter", "POST", "/v1/charges%3Bx", nil, "ambiguous-path"},
		{"an encoded path parameter, lower-case", "POST", "/v1/charges%3b", nil, "ambiguous-path"},
		{"an encoded slash", "POST", "/v1%2Fcharges", nil, "ambiguous-path"},
		{"an encoded slash, lower-case", "POST", "/v1%2fcharges", nil, "ambiguous-path"},
		{"an encoded backslash", "POST", "/v1%5Ccharges", nil, "ambiguous-path"},
		{"a path parameter", "POST", "/v1/charges;x", nil, "ambiguous-path"},
		{"an encoded slash out of a disabled route", "POST", "/internal/..%2Fv1/charges", nil, "ambiguous-path"},
		{"overrides naming two methods", "POST", "/v1/charges", []string{"X-HTTP-Method-Override: PUT", "X-HTTP-Method: DELETE"}, "ambiguous-method"},
		{"a GET whose second override names POST", "GET", "/v1/charges", []string{"X-HTTP-Method-Override: GET", "X-HTTP-Method: POST"}, "ambiguous-method"},
		{"a GET whose third override names POST", "GET", "/v1/charges", []string{"X-HTTP-Method-Override: GET", "X-Method-Override: POST"}, "ambiguous-method"},
		{"an override list naming POST first", "GET", "/v1/charges", []string{"X-HTTP-Method-Override: POST, GET"}, "ambiguous-method"},
		{"an override list naming POST last", "GET", "/v1/charges", []string{"X-HTTP-Method-Override: GET,POST"}, "ambiguous-method"},
		{"override lines GET then POST", "GET", "/v1/charges", []string{"X-HTTP-Method-Override: GET", "X-HTTP-Method-Override: POST"}, "ambiguous-method"},
	} {
		r := e.raw(t, rawRequest(c.method, c.target, c.extra...))
		if got := r.problemType(); got != c.want || r.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %s %s: %d %q, want 400 %s", c.name, c.method, c.target, r.StatusCode, got, c.want)
		}
	}
	if n := e.up.calls.Load(); n != 0 {
		t.Errorf("the upstream was called %d times", n)
	}
	if got := e.outcomes(defaultRoute, OutcomeAmbiguous) + e.outcomes("POST /v1/charges", OutcomeAmbiguous) + e.outcomes("/internal/", OutcomeAmbiguous); got != 16 {
		t.Errorf("ambiguous outcomes = %v, want 16", got)
	}
	// trailing_slash: distinct leaves /v1/charges/ to the routes it
	// matches as sent; a space inside a segment is no trailing one.
	d := newEnv(t, nil, chargesRoutes(func(p *Policy) { p.TrailingSlash = TrailingSlashDistinct }))
	for _, target := range []string{"/v1/charges/", "/v1/charges.json/", "/v1/my%20charges"} {
		if r := d.raw(t, rawRequest("POST", target)); r.StatusCode != http.StatusCreated {
			t.Errorf("%s: %d %q, want forwarded under the defaults", target, r.StatusCode, r.problemType())
		}
	}
	// Case is the upstream's business: /V1/charges is another path here.
	if r := e.raw(t, rawRequest("POST", "/V1/charges")); r.StatusCode != http.StatusCreated {
		t.Errorf("/V1/charges under path_case sensitive: %d, want forwarded under the defaults", r.StatusCode)
	}
}

// A path with a trailing slash goes to the route of the path without it
// when that route is the more specific one, compared by their paths alone
// (a host in a pattern makes it no longer); a route of its own for the
// spelling (POST /v1/charges/ beside POST /v1/charges) keeps it.
func TestTrailingSlashSpellingGoesToTheMoreSpecificRoute(t *testing.T) {
	charges := DefaultPolicy()
	charges.RequireKey = true
	for _, tc := range []struct {
		name   string
		routes []Route
		want   int // the status of a keyless POST /v1/charges/
	}{
		{"under a subtree route", []Route{
			{Pattern: "/v1/", Policy: DefaultPolicy()},
			{Pattern: "POST /v1/charges", Policy: charges},
		}, http.StatusBadRequest},
		{"with a route of its own", []Route{
			{Pattern: "POST /v1/charges", Policy: charges},
			{Pattern: "POST /v1/charges/", Policy: DefaultPolicy()},
		}, http.StatusCreated},
		{"with a route of its own, beside a host's", []Route{
			{Pattern: "POST h.example/v1/charges", Policy: charges},
			{Pattern: "/v1/charges/", Policy: DefaultPolicy()},
		}, http.StatusCreated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil, func(o *Options) { o.Routes = tc.routes })
			if r := e.raw(t, rawRequest("POST", "/v1/charges/")); r.StatusCode != tc.want {
				t.Errorf("POST /v1/charges/: %d %q, want %d", r.StatusCode, r.problemType(), tc.want)
			}
			if r := e.raw(t, rawRequest("POST", "/v1/charges")); r.problemType() != "missing-key" {
				t.Errorf("POST /v1/charges: %d %q, want 400 missing-key", r.StatusCode, r.problemType())
			}
		})
	}
}

// path_case: insensitive matches a route's pattern in any case, for
// upstreams that do (ASP.NET, IIS).
func TestPathCaseInsensitiveRouteMatchesAnyCase(t *testing.T) {
	e := newEnv(t, nil, chargesRoutes(func(p *Policy) { p.PathCase = PathCaseInsensitive }))
	for _, target := range []string{"/V1/charges", "/v1/CHARGES", "/V1/%43harges"} {
		if r := e.raw(t, rawRequest("POST", target)); r.problemType() != "missing-key" {
			t.Errorf("%s: %d %q, want 400 missing-key", target, r.StatusCode, r.problemType())
		}
	}
	// The key is one operation in any case of the path.
	first := e.raw(t, rawPost("/v1/charges", "h.example", "k-1"))
	again := e.raw(t, rawPost("/V1/Charges", "h.example", "k-1"))
	if first.StatusCode != http.StatusCreated || !again.replayed() {
		t.Errorf("/v1/charges then /V1/Charges with one key: %d, replayed=%v; want the replay", first.StatusCode, again.replayed())
	}
}

// On a path_case: insensitive route a key from the payload, too, is one
// operation in any case of the path: it is namespaced by the path as the
// route reads it, so the second spelling replays, never executes again.
func TestPathCaseInsensitivePayloadKeyIsOneOperationInAnyCase(t *testing.T) {
	e := newEnv(t, nil, chargesRoutes(func(p *Policy) {
		p.PathCase = PathCaseInsensitive
		p.Header, p.KeySources = "", mustSources(t, "json:/id")
	}))
	post := func(target string) *response {
		t.Helper()
		return e.raw(t, "POST "+target+" HTTP/1.1\r\nHost: h.example\r\nContent-Type: application/json\r\nContent-Length: 11\r\nConnection: close\r\n\r\n"+`{"id":"o1"}`)
	}
	first, again := post("/v1/charges"), post("/V1/Charges")
	if first.StatusCode != http.StatusCreated || !again.replayed() {
		t.Errorf("/v1/charges then /V1/Charges with one payload key: %d, replayed=%v; want the replay", first.StatusCode, again.replayed())
	}
	if n := e.up.calls.Load(); n != 1 {
		t.Errorf("executions = %d, want 1", n)
	}
}

// A more specific case-sensitive route still wins over a less specific
// insensitive one, and the other way round, compared without case.
func TestPathCaseMixedRoutesPickTheMostSpecific(t *testing.T) {
	strict := DefaultPolicy()
	strict.RequireKey = true
	loose := DefaultPolicy()
	loose.PathCase = PathCaseInsensitive
	e := newEnv(t, nil, func(o *Options) {
		o.Routes = []Route{
			{Pattern: "/api/", Policy: loose},
			{Pattern: "POST /api/charges", Policy: strict},
			{Pattern: "/Admin/", Disabled: true, Policy: DefaultPolicy()},
			{Pattern: "POST /admin/jobs", Policy: func() Policy { p := strict; p.PathCase = PathCaseInsensitive; return p }()},
		}
	})
	for target, want := range map[string]string{
		"/api/charges":  "missing-key", // the sensitive route, as written
		"/API/charges":  "",            // /api/ in any case; the strict route is case-sensitive
		"/Admin/jobs":   "missing-key", // the insensitive POST route is more specific than /Admin/
		"/Admin/other":  "",
		"/ADMIN/JOBS/x": "",
	} {
		r := e.raw(t, rawRequest("POST", target))
		if got := r.problemType(); got != want {
			t.Errorf("%s: %d %q, want %q", target, r.StatusCode, got, want)
		}
	}
}

// Under path_case: sensitive, the default, two routes whose patterns differ
// only in case are two routes, each matching its own spelling; under
// insensitive they are one route written twice, and the routes are refused.
func TestPathCaseSensitiveRoutesMayDifferOnlyInCase(t *testing.T) {
	strict := DefaultPolicy()
	strict.RequireKey = true
	e := newEnv(t, nil, func(o *Options) {
		o.Routes = []Route{{Pattern: "POST /orders", Policy: strict}, {Pattern: "POST /Orders", Policy: DefaultPolicy()}}
	})
	for target, want := range map[string]string{"/orders": "missing-key", "/Orders": ""} {
		if r := e.raw(t, rawRequest("POST", target)); r.problemType() != want {
			t.Errorf("%s: %d %q, want %q", target, r.StatusCode, r.problemType(), want)
		}
	}
	loose := DefaultPolicy()
	loose.PathCase = PathCaseInsensitive
	err := e.handler.SetRoutes(DefaultPolicy(), []Route{{Pattern: "POST /orders", Policy: strict}, {Pattern: "POST /Orders", Policy: loose}})
	if err == nil || !strings.Contains(err.Error(), "but for case") {
		t.Errorf("routes differing only in case, one of them insensitive: %v, want them refused", err)
	}
}

// ambiguous_paths: allow forwards such a path under the route it matches
// as sent; every request reaches the upstream with its path as sent.
func TestPathsAreForwardedAsSent(t *testing.T) {
	e := newEnv(t, nil, func(o *Options) { o.Default.AmbiguousPaths = AmbiguousAllow })
	for _, target := range []string{"/v1/%63harges", "/v1%2Fcharges", "/v1/charges;x", "/a/%2e%2e/b", "/a//b"} {
		r := e.raw(t, rawPost(target, "h.example", "k-"+target))
		if r.StatusCode != http.StatusCreated {
			t.Errorf("%s: %d %s", target, r.StatusCode, r.body)
			continue
		}
		if got := e.up.last().RequestURI; got != target {
			t.Errorf("%s reached the upstream as %s", target, got)
		}
	}
}

// A key from the payload names one operation whatever the spelling of its
// path or method: a second spelling never executes it again. Spellings an
// upstream may tell apart (a repeated slash, the method's case, a method
// override) are a 422, never the first one's answer.
func TestPayloadKeysAreOneOperationAcrossSpellings(t *testing.T) {
	e := newEnv(t, nil, withPolicy(func(p *Policy) {
		p.Header, p.KeySources = "", mustSources(t, "json:/id")
	}))
	post := func(method, target string, extra ...string) *response {
		t.Helper()
		head := method + " " + target + " HTTP/1.1\r\nHost: h.example\r\nContent-Type: application/json\r\nContent-Length: 11\r\nConnection: close\r\n"
		for _, h := range extra {
			head += h + "\r\n"
		}
		return e.raw(t, head+"\r\n"+`{"id":"o1"}`)
	}
	if r := post("POST", "/orders"); r.StatusCode != http.StatusCreated {
		t.Fatalf("first: %d %s", r.StatusCode, r.body)
	}
	for _, target := range []string{"/%6Frders", "/x/../orders"} {
		if r := post("POST", target); !r.replayed() {
			t.Errorf("%s: %d replayed=%v, want the replay", target, r.StatusCode, r.replayed())
		}
	}
	for name, r := range map[string]*response{
		"//orders": post("POST", "//orders"),
		"post":     post("post", "/orders"),
		"override": post("POST", "/orders", "X-HTTP-Method-Override: POST"),
	} {
		if r.problemType() != "payload-mismatch" {
			t.Errorf("%s: %d %q, want 422 payload-mismatch", name, r.StatusCode, r.problemType())
		}
	}
	if n := e.up.calls.Load(); n != 1 {
		t.Errorf("executions = %d, want 1", n)
	}
}

// A format suffix a route's parameter took (/v1/charges/ch_1.json on POST
// /v1/charges/{id}), which Rails routes to the action of
// /v1/charges/ch_1, names the same operation as the path without it: its
// payload key is that path's, so the second spelling is a 422, never a
// second execution.
func TestPayloadKeyIsOneOperationWithOrWithoutAFormatSuffixAfterAParameter(t *testing.T) {
	e := newEnv(t, nil, func(o *Options) {
		p := DefaultPolicy()
		p.RequireKey = true
		p.Header, p.KeySources = "", mustSources(t, "json:/id")
		o.Routes = []Route{
			{Pattern: "POST /v1/charges/{id}", Policy: p},
			{Pattern: "POST /v1/files/{rest...}", Policy: p},
		}
	})
	post := func(target string) *response {
		t.Helper()
		return e.raw(t, "POST "+target+" HTTP/1.1\r\nHost: h.example\r\nContent-Type: application/json\r\nContent-Length: 11\r\nConnection: close\r\n\r\n"+`{"id":"k1"}`)
	}
	for _, spellings := range [][]string{
		{"/v1/charges/ch_1", "/v1/charges/ch_1.json", "/v1/charges/ch_1.json/"},
		{"/v1/files/a/b.json", "/v1/files/a/b"},
	} {
		before := e.up.calls.Load()
		if r := post(spellings[0]); r.StatusCode != http.StatusCreated {
			t.Fatalf("%s: %d %s", spellings[0], r.StatusCode, r.body)
		}
		for _, target := range spellings[1:] {
			if r := post(target); r.problemType() != "payload-mismatch" {
				t.Errorf("%s after %s with one key: %d %q, want 422 payload-mismatch", target, spellings[0], r.StatusCode, r.problemType())
			}
		}
		if n := e.up.calls.Load() - before; n != 1 {
			t.Errorf("%v: executions = %d, want 1", spellings, n)
		}
	}
}

// A client-chosen key reused on another spelling of the same path is the
// same operation; the method override is part of the fingerprint.
func TestHeaderKeyOnAnotherSpellingOfThePathReplays(t *testing.T) {
	e := newEnv(t, nil)
	e.raw(t, rawPost("/v1/charges", "h.example", "k-1"))
	if r := e.raw(t, rawPost("/v1/%63harges", "h.example", "k-1")); !r.replayed() {
		t.Errorf("/v1/%%63harges: %d replayed=%v, want the replay", r.StatusCode, r.replayed())
	}
	if r := e.raw(t, rawPost("/v1/charges", "h.example", "k-1", "X-HTTP-Method-Override: DELETE")); r.problemType() != "payload-mismatch" {
		t.Errorf("with a method override: %d %q, want 422", r.StatusCode, r.problemType())
	}
}
