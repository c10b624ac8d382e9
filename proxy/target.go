package proxy

import (
	"net/http"
	"net/textproto"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/idempotency-proxy/idempotency-proxy/internal/pathread"
)

// target is how the proxy reads a request's method and path, for its
// route, its fingerprint and the namespace of a key derived from its
// payload (docs/request-handling.md, "Paths and methods"). The request
// itself is forwarded as sent.
//
// Routes take the broadest reading an upstream may have, so that every
// spelling of a route's path gets that route's policy. The fingerprint
// takes the narrowest one every upstream shares, so that two requests an
// upstream may tell apart are never one operation to the proxy: a key
// reused on another spelling is a 422, never another operation's answer.
type target struct {
	// method is the method routes match: the one a method-override header
	// names, else the request's own; upper-cased.
	method string
	// own is the request's own method, upper-cased.
	own string
	// fpMethod is what the fingerprint hashes for the method: the method
	// as sent, and any method-override headers with their values.
	fpMethod string
	// escaped is the request's path as sent (r.URL.EscapedPath()).
	escaped string
	// path is escaped in RFC 3986 normal form (pathread.Normal). Routes
	// match it (ServeMux also merges repeated slashes) and the fingerprint
	// hashes it.
	path string
	// routed is the spelling of path the route matched: path, or path
	// without its trailing slashes or format suffix when the route took
	// that spelling (routeTable.lookupSpelling). Keys from the payload
	// are namespaced by it. Set by the route table.
	routed string
	// odd is set when the path can be read two ways (pathread.Normal).
	odd bool
	// named is every distinct method the method-override headers name,
	// upper-cased, in the order sent; nil without such headers.
	named []string
	// overrides is set when the method-override headers disagree: more
	// than one method, or one that is not a method.
	overrides overrideProblem
	// refuse is set by the route table when the request is refused for
	// the reading above: failAmbiguousPath or failAmbiguousMethod.
	refuse failure
	// headers is what the walk for override headers found of the
	// others: the headers the proxy edits need no lookup when absent.
	headers headerScan
}

type overrideProblem uint8

const (
	overrideNone overrideProblem = iota
	overrideConflict
)

// methodOverrideHeaders are the headers through which frameworks (Rails,
// Laravel, ASP.NET, Express's method-override, Google APIs) let a client
// that can only send GET or POST name the method an upstream applies.
// Each is also read with any of its hyphens sent as underscores
// (X_HTTP_METHOD_OVERRIDE): Rack, Puma and every CGI-style server map "-"
// and "_" to one variable, HTTP_X_HTTP_METHOD_OVERRIDE, and net/http
// forwards such names as sent.
var methodOverrideHeaders = overrideSpellings("X-Http-Method-Override", "X-Http-Method", "X-Method-Override")

// overrideNames holds methodOverrideHeaders, and overrideLens their lengths.
var overrideNames, overrideLens = func() (map[string]bool, map[int]bool) {
	names, lens := map[string]bool{}, map[int]bool{}
	for _, n := range methodOverrideHeaders {
		names[n], lens[len(n)] = true, true
	}
	return names, lens
}()

// headerScan is what one walk over a request's header names found.
type headerScan uint8

const (
	scanOverride   headerScan = 1 << iota // a method-override header
	scanConnection                        // Connection
	scanUpgrade                           // Upgrade or HTTP2-Settings
	// scanWalked is set when every name was walked: a header whose bit
	// is then clear is absent. Without it only scanOverride is known.
	scanWalked
)

// scanHeaders reports whether h holds a method-override header and, when
// it walks h, the hop-by-hop headers the proxy edits (connection.go). A
// request carries fewer headers than there are spellings of the override
// names, so it walks them, and looks up only those of an override's
// length; one with more is looked up name by name.
func scanHeaders(h http.Header) headerScan {
	if len(h) > len(methodOverrideHeaders) {
		for _, name := range methodOverrideHeaders {
			if _, ok := h[name]; ok {
				return scanOverride
			}
		}
		return 0
	}
	s := scanWalked
	for name := range h {
		switch {
		case name == "Connection":
			s |= scanConnection
		case name == "Upgrade" || name == "Http2-Settings":
			s |= scanUpgrade
		case len(name) > 0 && name[0] == 'X' && overrideLens[len(name)] && overrideNames[name]:
			s |= scanOverride
		}
	}
	return s
}

// lacks reports whether the request came with none of the headers of s,
// as readTarget's walk found them; false when it did not walk them all.
func (t *target) lacks(s headerScan) bool {
	return t.headers&scanWalked != 0 && t.headers&s == 0
}

// overrideSpellings returns each of names, then its spellings with one or
// more of its hyphens as underscores, each as net/http canonicalises it
// ("X_http_method_override"): the header map's keys they arrive under.
func overrideSpellings(names ...string) []string {
	var out []string
	for _, name := range names {
		hyphens := strings.Count(name, "-")
		for mask := 0; mask < 1<<hyphens; mask++ {
			b, n := []byte(name), 0
			for i, c := range b {
				if c == '-' {
					if mask&(1<<n) != 0 {
						b[i] = '_'
					}
					n++
				}
			}
			out = append(out, textproto.CanonicalMIMEHeaderKey(string(b)))
		}
	}
	return out
}

// readTarget reads r's method and path. It allocates nothing for a request
// whose method is upper-case, that carries no method override and whose
// path is already in normal form.
func readTarget(r *http.Request) target {
	t := target{own: upperASCII(r.Method), fpMethod: r.Method}
	t.method = t.own
	t.readOverride(r.Header, r.Method)
	t.escaped = r.URL.EscapedPath()
	t.path, t.odd = pathread.Normal(t.escaped)
	return t
}

// readOverride applies the method-override headers: the method they name
// is the one routes match, and they are part of the fingerprint. Headers
// that name two methods — two header names, a comma-separated list, two
// lines — or something that is not a method are a request upstreams read
// differently: Express's method-override takes the first of a list,
// Rack ignores a list, and each framework reads only its own header.
func (t *target) readOverride(h http.Header, sent string) {
	if t.headers = scanHeaders(h); t.headers&scanOverride == 0 {
		return
	}
	var fp strings.Builder
	fp.WriteString(sent)
	for _, name := range methodOverrideHeaders {
		values, ok := h[name]
		if !ok {
			continue
		}
		// Header names hold no ':' and values no '\n' (net/http refuses
		// them), so this spelling cannot be another request's.
		fp.WriteString("\n" + name + ":")
		for i, v := range values {
			if i > 0 {
				fp.WriteString("\n")
			}
			fp.WriteString(v)
			for _, m := range strings.Split(v, ",") {
				t.addNamed(upperASCII(strings.TrimSpace(m)))
			}
		}
	}
	t.fpMethod = fp.String()
	if len(t.named) > 0 {
		t.method = t.named[0]
	}
}

// addNamed records a method an override header names.
func (t *target) addNamed(m string) {
	switch {
	case !httpguts.ValidHeaderFieldName(m):
		t.overrides = overrideConflict // not a method: an upstream may ignore it, or fail
	case slices.Contains(t.named, m):
	default:
		t.named = append(t.named, m)
		if len(t.named) > 1 {
			t.overrides = overrideConflict
		}
	}
}

// upperASCII upper-cases s's ASCII letters; it allocates only when s has
// a lower-case one.
func upperASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if 'a' <= s[i] && s[i] <= 'z' {
			return strings.ToUpper(s)
		}
	}
	return s
}

// lowerASCII lower-cases s's ASCII letters; it allocates only when s has
// an upper-case one. Percent-escapes keep their meaning ("%2F" is "%2f").
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}
