package proxy

import (
	"fmt"
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

// parseScopeHeader parses the configuration form of a scope entry.
func parseScopeHeader(s string) (ScopeHeader, error) {
	s = strings.TrimSpace(s)
	if len(s) >= len(cookieScopePrefix) && strings.EqualFold(s[:len(cookieScopePrefix)], cookieScopePrefix) {
		name := strings.TrimSpace(s[len(cookieScopePrefix):])
		if !httpguts.ValidHeaderFieldName(name) {
			return ScopeHeader{}, fmt.Errorf("invalid cookie name %q in %q", name, s)
		}
		return ScopeHeader{Cookie: name}, nil
	}
	if !httpguts.ValidHeaderFieldName(s) {
		return ScopeHeader{}, fmt.Errorf("invalid header name %q (or Cookie:NAME for one cookie)", s)
	}
	return ScopeHeader{Header: textproto.CanonicalMIMEHeaderKey(s)}, nil
}

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

// UnmarshalText parses the configuration form, as parseScopeHeader.
func (s *ScopeHeader) UnmarshalText(text []byte) error {
	v, err := parseScopeHeader(string(text))
	if err != nil {
		return err
	}
	*s = v
	return nil
}
