package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/idempotency-proxy/idempotency-proxy/internal/jsonread"
)

// KeySourceKind says where in a request a KeySource looks for the key.
type KeySourceKind uint8

const (
	// KeyFromHeader reads a header, raw or as an RFC 8941 string.
	KeyFromHeader KeySourceKind = iota + 1
	// KeyFromQuery reads a query parameter that must appear once.
	KeyFromQuery
	// KeyFromJSON reads the string or integer at a JSON pointer in the body.
	KeyFromJSON
	// KeyFromBodySHA256 uses the hex SHA-256 of a non-empty body.
	KeyFromBodySHA256
	// KeyFromCookie reads a cookie that must appear once.
	KeyFromCookie
)

// The properties of a kind, each decided here once: what the other files
// ask of a source (docs/architecture.md, "Adding a key source").

// word is the kind's name in the configuration form, and, for a key
// derived from the payload, its namespace in the storage key.
func (k KeySourceKind) word() string {
	switch k {
	case KeyFromHeader:
		return "header"
	case KeyFromQuery:
		return "query"
	case KeyFromJSON:
		return "json"
	case KeyFromBodySHA256:
		return "body_sha256"
	case KeyFromCookie:
		return "cookie"
	}
	return ""
}

// fromPayload reports whether the key is derived from the request body:
// the body must be read before the key is known, and the key is the
// payload's, not a client's choice, so its storage key is namespaced by
// method, host and path (storageKeyFrom).
func (k KeySourceKind) fromPayload() bool {
	return k == KeyFromJSON || k == KeyFromBodySHA256
}

// header is the name of the header the source reads, "" when it reads
// none: an operator's key is read from it as a client would send it. A
// cookie source answers "": an operator gives the cookie's value.
func (k KeySource) header() string {
	if k.Kind == KeyFromHeader {
		return k.Name
	}
	return ""
}

// forwarded is the header that carries the source's key to the upstream,
// "" when none does: it is kept when a client names it in Connection, so
// the upstream reads the key the proxy read. A cookie source's is Cookie.
func (k KeySource) forwarded() string {
	if k.Kind == KeyFromCookie {
		return "Cookie"
	}
	return k.header()
}

// KeySource is one place an idempotency key may come from, written
// "header:NAME", "query:NAME", "cookie:NAME", "json:/pointer" or
// "body_sha256" in the
// configuration (docs/request-handling.md, "Where the key comes from").
// A route's sources are tried in order and the first one present gives the
// key, so clients that cannot send an Idempotency-Key header (webhook
// senders, partners with an order id in the payload) are still protected.
type KeySource struct {
	Kind KeySourceKind
	// Name is the header's canonical name, the query parameter's name, or
	// the cookie's name.
	Name string
	// Pointer locates the key in a JSON body (KeyFromJSON).
	Pointer jsonread.Pointer
}

// headerKeySource is the source of the "header" shorthand: [header:NAME].
func headerKeySource(name string) KeySource {
	return KeySource{Kind: KeyFromHeader, Name: http.CanonicalHeaderKey(name)}
}

const keySourceForms = "header:NAME, query:NAME, cookie:NAME, json:/pointer or body_sha256"

// parseKeySource parses the configuration form of a key source.
func parseKeySource(s string) (KeySource, error) {
	if s == "body_sha256" {
		return KeySource{Kind: KeyFromBodySHA256}, nil
	}
	kind, arg, ok := strings.Cut(s, ":")
	if !ok {
		if s == "" {
			return KeySource{}, errors.New("empty key source: want " + keySourceForms)
		}
		return KeySource{}, fmt.Errorf("key source %q: want %s", s, keySourceForms)
	}
	arg = strings.TrimSpace(arg)
	switch kind {
	case "header":
		if arg == "" {
			return KeySource{}, fmt.Errorf("key source %q: header: needs a header name, as in header:Idempotency-Key", s)
		}
		if !httpguts.ValidHeaderFieldName(arg) {
			return KeySource{}, fmt.Errorf("key source %q: %q is not a valid header name", s, arg)
		}
		return headerKeySource(arg), nil
	case "query":
		if arg == "" {
			return KeySource{}, fmt.Errorf("key source %q: query: needs a parameter name, as in query:idempotency_key", s)
		}
		return KeySource{Kind: KeyFromQuery, Name: arg}, nil
	case "cookie":
		if arg == "" {
			return KeySource{}, fmt.Errorf("key source %q: cookie: needs a cookie name, as in cookie:idempotency_key", s)
		}
		if !httpguts.ValidHeaderFieldName(arg) {
			return KeySource{}, fmt.Errorf("key source %q: %q is not a valid cookie name", s, arg)
		}
		return KeySource{Kind: KeyFromCookie, Name: arg}, nil
	case "json":
		p, err := jsonread.ParsePointer(arg)
		if err != nil {
			return KeySource{}, fmt.Errorf("key source %q: %w", s, err)
		}
		if p.IsRoot() {
			return KeySource{}, fmt.Errorf("key source %q: json: needs a pointer to a member, as in json:/id", s)
		}
		return KeySource{Kind: KeyFromJSON, Pointer: p}, nil
	case "body_sha256":
		return KeySource{}, fmt.Errorf("key source %q: body_sha256 takes no argument", s)
	}
	return KeySource{}, fmt.Errorf("key source %q: unknown kind %q: want %s", s, kind, keySourceForms)
}

// check reports why a source built in code cannot find a key; a parsed
// source is valid.
func (k KeySource) check() error {
	switch k.Kind {
	case KeyFromHeader:
		if !httpguts.ValidHeaderFieldName(k.Name) {
			return fmt.Errorf("invalid header name %q", k.Name)
		}
	case KeyFromQuery:
		if k.Name == "" {
			return errors.New("query: needs a parameter name")
		}
	case KeyFromCookie:
		if !httpguts.ValidHeaderFieldName(k.Name) {
			return fmt.Errorf("invalid cookie name %q", k.Name)
		}
	case KeyFromJSON:
		if k.Pointer.IsRoot() {
			return errors.New("json: needs a pointer to a member, as in json:/id")
		}
	case KeyFromBodySHA256:
	default:
		return errors.New("empty key source: want " + keySourceForms)
	}
	return nil
}

// String returns the configuration form of the source.
func (k KeySource) String() string {
	switch k.Kind {
	case KeyFromHeader, KeyFromQuery, KeyFromCookie:
		return k.Kind.word() + ":" + k.Name
	case KeyFromJSON:
		return k.Kind.word() + ":" + k.Pointer.String()
	}
	return k.Kind.word()
}

// MarshalText returns the configuration form of the source.
func (k KeySource) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText parses the configuration form, as parseKeySource.
func (k *KeySource) UnmarshalText(text []byte) error {
	s, err := parseKeySource(string(text))
	if err != nil {
		return err
	}
	*k = s
	return nil
}

// readsBody reports whether the source needs the request body.
func (k KeySource) readsBody() bool { return k.Kind.fromPayload() }

// describe names the source for a client, in a problem's detail.
func (k KeySource) describe() string {
	switch k.Kind {
	case KeyFromHeader:
		return "the " + k.Name + " header"
	case KeyFromQuery:
		return "the " + k.Name + " query parameter"
	case KeyFromCookie:
		return "the " + k.Name + " cookie"
	case KeyFromJSON:
		return "a JSON string or integer at " + k.Pointer.String() + " in the body"
	case KeyFromBodySHA256:
		return "a body"
	}
	return ""
}

// describeKeySources names what a request must carry for sources to find
// a key, for the detail of a missing-key problem: "the Idempotency-Key
// header or a JSON string or integer at /id in the body".
func describeKeySources(sources []KeySource) string {
	var b strings.Builder
	for i, k := range sources {
		switch {
		case i == 0:
		case i == len(sources)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(k.describe())
	}
	return b.String()
}
