package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/idempotency-proxy/idempotency-proxy/internal/jsonread"
)

// probeTemplate is a reconcile.request parsed: the lookup's method and the
// parts of its target, literal text and placeholders in turn. It is parsed
// once, when the route table is built, and filled at each request.
type probeTemplate struct {
	method string
	target string // as written, its placeholders unfilled (LookupTarget)
	parts  []probePart
}

// probePart is literal text or one placeholder of a probe's target.
type probePart struct {
	kind    placeholder
	literal string           // kind placeLiteral
	name    string           // the header's or query parameter's name
	pointer jsonread.Pointer // kind placeJSON
	inQuery bool             // after the target's "?": escaped as a query value
}

type placeholder uint8

const (
	placeLiteral placeholder = iota
	placeKey                 // {key}
	placeJSON                // {json:/pointer}
	placeHeader              // {header:Name}
	placeQuery               // {query:name}
	placePath                // {path}
)

// placeholderForms is what an error about an unknown placeholder lists.
const placeholderForms = "{key}, {json:/pointer}, {header:Name}, {query:name}, {path}"

// parseProbeTemplate parses "METHOD /path?query" with placeholders.
func parseProbeTemplate(s string) (*probeTemplate, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New(`is empty: give the upstream's lookup as "METHOD /path?query", e.g. "GET /v1/charges?idempotency_key={key}"`)
	}
	method, target, ok := strings.Cut(s, " ")
	target = strings.TrimSpace(target)
	if !ok || !httpguts.ValidHeaderFieldName(method) || method != strings.ToUpper(method) {
		return nil, fmt.Errorf(`%q: want "METHOD /path?query", an upper-case method, a space and the path, e.g. "GET /v1/charges?idempotency_key={key}"`, s)
	}
	if !strings.HasPrefix(target, "/") && !strings.HasPrefix(target, "{path}") || strings.ContainsAny(target, " \t#") {
		return nil, fmt.Errorf("%q: the target must start with / (or {path}) and hold no space or fragment (#)", target)
	}
	if method != http.MethodGet && method != http.MethodHead {
		// A lookup is sent again and again, and must change nothing.
		return nil, fmt.Errorf("%q: the lookup's method must be GET or HEAD, which change nothing on the upstream, e.g. \"GET /v1/charges?idempotency_key={key}\"", s)
	}
	t := &probeTemplate{method: method, target: target}
	inQuery := false
	for rest := target; rest != ""; {
		open := strings.IndexAny(rest, "{}")
		if open < 0 {
			t.literal(rest, &inQuery)
			break
		}
		if rest[open] == '}' {
			return nil, fmt.Errorf("%q: a } without its {", target)
		}
		t.literal(rest[:open], &inQuery)
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return nil, fmt.Errorf("%q: a { without its }", target)
		}
		p, err := parsePlaceholder(rest[open+1 : open+end])
		if err != nil {
			return nil, err
		}
		p.inQuery = inQuery
		t.parts = append(t.parts, p)
		rest = rest[open+end+1:]
	}
	return t, nil
}

func (t *probeTemplate) literal(s string, inQuery *bool) {
	if s == "" {
		return
	}
	t.parts = append(t.parts, probePart{literal: s, inQuery: *inQuery})
	if strings.Contains(s, "?") {
		*inQuery = true
	}
}

func parsePlaceholder(s string) (probePart, error) {
	word, arg, hasArg := strings.Cut(s, ":")
	switch {
	case s == "key":
		return probePart{kind: placeKey}, nil
	case s == "path":
		return probePart{kind: placePath}, nil
	case word == "json" && hasArg:
		p, err := jsonread.ParsePointer(arg)
		if err != nil {
			return probePart{}, fmt.Errorf("placeholder {%s}: %v", s, err)
		}
		if p.IsRoot() {
			return probePart{}, fmt.Errorf("placeholder {%s}: name a member, e.g. {json:/order_id}", s)
		}
		return probePart{kind: placeJSON, pointer: p}, nil
	case word == "header" && hasArg:
		if !httpguts.ValidHeaderFieldName(arg) {
			return probePart{}, fmt.Errorf("placeholder {%s}: invalid header name %q", s, arg)
		}
		return probePart{kind: placeHeader, name: http.CanonicalHeaderKey(arg)}, nil
	case word == "query" && hasArg && arg != "":
		return probePart{kind: placeQuery, name: arg}, nil
	}
	return probePart{}, fmt.Errorf("unknown placeholder {%s}: use one of %s", s, placeholderForms)
}

// errProbeHole is a placeholder the request cannot fill: the request is
// refused (400) rather than settled one day by a probe with a hole.
type errProbeHole struct{ what string }

func (e errProbeHole) Error() string {
	return "the route's reconcile.request needs " + e.what + ", which the request does not carry"
}

// fill returns the probe's target for request r with key and body, or an
// errProbeHole naming the value the request lacks.
func (t *probeTemplate) fill(r *http.Request, key string, body []byte) (string, error) {
	var b strings.Builder
	for _, p := range t.parts {
		var v string
		switch p.kind {
		case placeLiteral:
			b.WriteString(p.literal)
			continue
		case placeKey:
			v = key
		case placePath:
			v = r.URL.Path
			if !p.inQuery {
				b.WriteString(r.URL.EscapedPath())
				continue
			}
		case placeHeader:
			vs := r.Header[p.name]
			if len(vs) != 1 || vs[0] == "" {
				return "", errProbeHole{"one " + p.name + " header"}
			}
			v = vs[0]
		case placeQuery:
			vs := r.URL.Query()[p.name]
			if len(vs) != 1 || vs[0] == "" {
				return "", errProbeHole{"one query parameter " + p.name}
			}
			v = vs[0]
		case placeJSON:
			s, err := jsonKey(body, p.pointer)
			if err != nil {
				return "", errProbeHole{"a string or integer at " + p.pointer.String() + " of its JSON body"}
			}
			v = s
		}
		switch {
		case p.inQuery:
			b.WriteString(url.QueryEscape(v))
		case v == "." || v == "..":
			// url.PathEscape leaves dots alone: a dot segment would
			// send the lookup to another resource of the upstream.
			return "", errProbeHole{"a value other than " + strconv.Quote(v) + " in the lookup's path"}
		case strings.ContainsAny(v, `/\`):
			// Escaped as %2F or %5C, it is one segment to some upstreams
			// and two to those that decode the path before routing it
			// (WSGI's PATH_INFO): the lookup would ask for another
			// resource, whose 404 reads as absent. Refused as a request
			// path holding them is (ambiguous-path).
			return "", errProbeHole{`a value without / or \ in the lookup's path`}
		default:
			b.WriteString(url.PathEscape(v))
		}
	}
	return b.String(), nil
}
