package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"

	"github.com/idempotency-proxy/idempotency-proxy/internal/jsonread"
)

var (
	// errNeedBody means requestKeyFrom reached a source that reads the body
	// before the caller read it: read it (bounded) and ask again.
	errNeedBody = errors.New("the idempotency key may be in the request body")

	errKeyEscape = errors.New("the idempotency key is not validly percent-encoded")
)

// keySourceError is a key that a source found but that is not valid. It
// names the source, so a client learns where the proxy looked.
type keySourceError struct {
	source KeySource
	err    error
}

func (e *keySourceError) Error() string { return e.err.Error() + " (" + e.source.String() + ")" }
func (e *keySourceError) Unwrap() error { return e.err }

// requestKeyFrom returns the idempotency key from the first of sources
// present in r, and the kind of the source that gave it. It returns errNoKey when none is, errNeedBody when it reached a
// source that reads the body and haveBody is false, and any other error
// (a *keySourceError) for a key that is present but invalid: 400
// invalid-key. A present but invalid key never falls through to the next
// source, or a client's typo would silently pick another key.
//
// body is the whole request body, already read; it is neither copied nor
// kept.
func requestKeyFrom(r *http.Request, sources []KeySource, body []byte, haveBody bool) (string, KeySourceKind, error) {
	for i := range sources {
		k := &sources[i]
		if k.readsBody() && !haveBody {
			return "", 0, errNeedBody
		}
		key, err := k.extract(r, body)
		switch {
		case err == errNoKey:
			continue
		case errors.Is(err, jsonread.ErrDuplicateName):
			return "", 0, err // the body's fault, not the key's
		case err != nil:
			return "", 0, &keySourceError{source: *k, err: err}
		}
		return key, k.Kind, nil
	}
	return "", 0, errNoKey
}

// extract returns the key this source finds, errNoKey, or why it is invalid.
func (k *KeySource) extract(r *http.Request, body []byte) (string, error) {
	switch k.Kind {
	case KeyFromHeader:
		return parseKey(r.Header, k.Name)
	case KeyFromQuery:
		return queryKey(r.URL.RawQuery, k.Name)
	case KeyFromCookie:
		return cookieKey(r.Header["Cookie"], k.Name)
	case KeyFromJSON:
		return jsonKey(body, k.Pointer)
	case KeyFromBodySHA256:
		if len(body) == 0 {
			// Every body-less request would share one key, and differ
			// only in path: absent, not a key.
			return "", errNoKey
		}
		sum := sha256.Sum256(body)
		return hex.EncodeToString(sum[:]), nil
	}
	return "", errNoKey
}

// queryKey returns the one value of the query parameter name in rawQuery.
// Parameters are separated by "&" and percent-decoded as url.ParseQuery
// does ("+" is a space); it allocates only for an escaped key.
func queryKey(rawQuery, name string) (string, error) {
	var value string
	found := false
	for rest := rawQuery; rest != ""; {
		var pair string
		pair, rest, _ = strings.Cut(rest, "&")
		k, v, _ := strings.Cut(pair, "=")
		if k != name {
			if strings.IndexByte(k, '%') < 0 && strings.IndexByte(k, '+') < 0 {
				continue
			}
			if uk, err := url.QueryUnescape(k); err != nil || uk != name {
				continue
			}
		}
		if found {
			return "", errKeyMultiple
		}
		value, found = v, true
	}
	if !found {
		return "", errNoKey
	}
	if strings.IndexByte(value, '%') >= 0 || strings.IndexByte(value, '+') >= 0 {
		v, err := url.QueryUnescape(value)
		if err != nil {
			return "", errKeyEscape
		}
		value = v
	}
	if err := checkKey(value); err != nil {
		return "", err
	}
	return value, nil
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

// jsonKey returns the string or integer at p in body, an integer in its
// shortest decimal form ("-0" is "0"). Anything else — a body that is not
// one JSON text, no value there, another type, an integer beyond 2^53 that
// JavaScript reads as another — is absent (require_key then refuses it): the body belongs to the upstream, and the proxy does not
// refuse what it cannot use. A body that repeats a member name is refused
// (a *jsonread.DuplicateNameError): upstreams differ on which member
// counts, so no key read from it is the upstream's.
func jsonKey(body []byte, p jsonread.Pointer) (string, error) {
	v, err := p.Find(body)
	switch {
	case errors.Is(err, jsonread.ErrDuplicateName):
		return "", err
	case err != nil:
		return "", errNoKey
	}
	var key string
	switch {
	case v[0] == '"':
		key = jsonread.Unquote(v)
	case string(v) == "-0":
		key = "0"
	case isSafeInt(v):
		key = string(v)
	default:
		return "", errNoKey
	}
	if err := checkKey(key); err != nil {
		return "", err
	}
	return key, nil
}

// maxSafeInteger is 2^53 - 1, JavaScript's Number.MAX_SAFE_INTEGER: the
// largest magnitude up to which every integer is a float64 of its own.
// Beyond it JSON.parse reads 9007199254740993 as 9007199254740992, so two
// keys would be one operation to a Node upstream.
const maxSafeInteger = "9007199254740991"

// isSafeInt reports whether the JSON number v is an integer (no fraction
// or exponent), as sent, whose magnitude is at most maxSafeInteger: one
// that every JSON reader, JavaScript's included, reads as that integer.
func isSafeInt(v []byte) bool {
	digits := v
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > len(maxSafeInteger) {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(digits) < len(maxSafeInteger) || string(digits) <= maxSafeInteger
}
