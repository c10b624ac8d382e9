package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// KeyFromCookie reads a cookie that must appear once: cookie:NAME.
const KeyFromCookie KeySourceKind = 5

// cookieSource is the cookie:NAME key source.
type cookieSource struct{}

func (cookieSource) kind() KeySourceKind { return KeyFromCookie }
func (cookieSource) form() string        { return "cookie:NAME" }
func (cookieSource) fromPayload() bool   { return false }

func (cookieSource) parse(s, arg string) (KeySource, error) {
	if arg == "" {
		return KeySource{}, fmt.Errorf("key source %q: cookie: needs a cookie name, as in cookie:idempotency_key", s)
	}
	if !httpguts.ValidHeaderFieldName(arg) {
		return KeySource{}, fmt.Errorf("key source %q: %q is not a valid cookie name", s, arg)
	}
	return KeySource{Kind: KeyFromCookie, Name: arg}, nil
}

func (cookieSource) check(k KeySource) error {
	if !httpguts.ValidHeaderFieldName(k.Name) {
		return fmt.Errorf("invalid cookie name %q", k.Name)
	}
	return nil
}

func (cookieSource) arg(k KeySource) string      { return k.Name }
func (cookieSource) describe(k KeySource) string { return "the " + k.Name + " cookie" }

// An operator gives a cookie's value; the Cookie header carries it to the
// upstream.
func (cookieSource) header(KeySource) string    { return "" }
func (cookieSource) forwarded(KeySource) string { return "Cookie" }

func (cookieSource) extract(k *KeySource, r *http.Request, _ []byte) (string, error) {
	return cookieKey(r.Header["Cookie"], k.Name)
}

// maxCookies is net/http's limit on the cookies of a request (GODEBUG
// httpcookiemaxnum): a Go upstream reads none from a request with more.
const maxCookies = 3000

var (
	errCookieLines = errors.New("the Cookie header is sent more than once, and upstreams join its lines differently")
	errCookieCase  = errors.New("a cookie is named like the key's cookie in another case, which some upstreams take for it")
	errCookieValue = errors.New("the idempotency key cookie holds a double quote, a backslash, a comma or a space, which upstreams read differently")
	errCookieCount = errors.New("more than 3000 cookies are sent, and a Go upstream then reads none")
)

// cookieValueSeparators are the bytes in a cookie key that upstreams read
// differently: a quote and a backslash, then cookieSplitters.
const cookieValueSeparators = "\\\"" + cookieSplitters

// cookieSplitters are the bytes at which some upstreams end a cookie's
// value where net/http reads on: Python's http.cookies at whitespace, RFC
// 2965 parsers at a comma.
const cookieSplitters = ", \t"

// cookieKey returns the value of the cookie called name in the Cookie
// header lines, read as net/http's (*Request).Cookie reads it: pairs split
// at ";", name and pair trimmed of spaces and tabs, a pair without "=" a
// cookie with an empty value, the double quotes a value may wear dropped.
// The value is taken as sent, not percent-decoded, as net/http takes it.
// Where upstreams read the cookie differently the key is refused, never
// guessed: a cookie sent twice, or also in another case (ASP.NET Core
// matches names case-insensitively), more than one Cookie line (WSGI
// servers join lines with ","), a value net/http drops or keeps whole
// where others split it, or more cookies than net/http reads.
func cookieKey(lines []string, name string) (string, error) {
	var value string
	n, exact, count := 0, false, 0
	for _, line := range lines {
		count += strings.Count(line, ";") + 1
		for rest := line; rest != ""; {
			var pair string
			pair, rest, _ = strings.Cut(rest, ";")
			k, v, _ := strings.Cut(textproto.TrimString(pair), "=")
			// Equal byte lengths keep the fold to ASCII: no other rune
			// folds to an ASCII letter in one byte.
			if k = textproto.TrimString(k); len(k) == len(name) && strings.EqualFold(k, name) {
				value, exact, n = v, k == name, n+1
			}
		}
	}
	switch {
	case n == 0:
		return "", errNoKey
	case n > 1:
		return "", errKeyMultiple
	case !exact:
		return "", errCookieCase
	case len(lines) > 1:
		return "", errCookieLines
	case count > maxCookies:
		return "", errCookieCount
	}
	if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
		value = value[1 : len(value)-1]
	}
	// RFC 6265 keeps these out of a cookie's value, and parsers part on
	// them: net/http reads "c1, sid=c2" whole, Python's http.cookies
	// reads c2 (whitespace ends a value there), RFC 2965 parsers split
	// at the comma.
	if strings.ContainsAny(value, cookieValueSeparators) {
		return "", errCookieValue
	}
	if err := checkKey(value); err != nil {
		return "", err
	}
	return value, nil
}
