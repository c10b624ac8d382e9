package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// ScopeHeader is one scope_headers entry: a header whose values namespace
// a key, or one cookie whose value does, written "Cookie:NAME" in the
// configuration ("Cookie" in any case; the cookie's name keeps its case,
// as cookie names are case-sensitive). Exactly one of the fields is set.
type ScopeHeader struct {
	// Header is the header's name, canonical once parsed.
	Header string
	// Cookie is the name of the cookie whose value scopes the key.
	Cookie string
}

const cookieScopePrefix = "Cookie:"

// check reports why an entry built in code cannot scope a key; a parsed
// entry is valid.
func (s ScopeHeader) check() error {
	switch {
	case s.Cookie == "":
		if !httpguts.ValidHeaderFieldName(s.Header) {
			return fmt.Errorf("invalid header name %q (or Cookie:NAME for one cookie)", s.Header)
		}
	case s.Header != "":
		return fmt.Errorf("header %q and cookie %q: set one", s.Header, s.Cookie)
	case !httpguts.ValidHeaderFieldName(s.Cookie):
		return fmt.Errorf("invalid cookie name %q in %q", s.Cookie, s.String())
	}
	return nil
}

// canonical is s with its header name as net/http keys it, so the request
// path can index the header map with it.
func (s ScopeHeader) canonical() ScopeHeader {
	s.Header = textproto.CanonicalMIMEHeaderKey(s.Header)
	return s
}

// String returns the configuration form: the header's name, or
// "Cookie:NAME".
func (s ScopeHeader) String() string {
	if s.Cookie != "" {
		return cookieScopePrefix + s.Cookie
	}
	return s.Header
}

// MarshalText returns the configuration form.
func (s ScopeHeader) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses the configuration form: a header name, or
// "Cookie:NAME".
func (s *ScopeHeader) UnmarshalText(text []byte) error {
	v := strings.TrimSpace(string(text))
	if len(v) >= len(cookieScopePrefix) && strings.EqualFold(v[:len(cookieScopePrefix)], cookieScopePrefix) {
		name := strings.TrimSpace(v[len(cookieScopePrefix):])
		if !httpguts.ValidHeaderFieldName(name) {
			return fmt.Errorf("invalid cookie name %q in %q", name, v)
		}
		*s = ScopeHeader{Cookie: name}
		return nil
	}
	if !httpguts.ValidHeaderFieldName(v) {
		return fmt.Errorf("invalid header name %q (or Cookie:NAME for one cookie)", v)
	}
	*s = ScopeHeader{Header: textproto.CanonicalMIMEHeaderKey(v)}
	return nil
}

// scopeCookiesReadOneWay returns an error when a Cookie:NAME scope cookie
// in h's Cookie header lines holds a comma, a space or a tab: the scope
// hashes "c1, sid=c2" whole, as net/http reads it, while Python's
// http.cookies reads the session c2, so one session's key could run
// again under a second scope.
func scopeCookiesReadOneWay(h http.Header, scope []ScopeHeader) error {
	for _, s := range scope {
		if s.Cookie == "" {
			continue
		}
		split := false
		forEachCookie(h["Cookie"], s.Cookie, func(v string) { split = split || strings.ContainsAny(v, cookieSplitters) })
		if split {
			return fmt.Errorf("%w (%s)", errScopeCookieSplit, s)
		}
	}
	return nil
}

var errScopeCookieSplit = errors.New("the cookie that scopes the idempotency key holds a comma, a space or a tab, which upstreams read differently")
