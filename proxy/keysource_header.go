package proxy

import (
	"fmt"
	"net/http"

	"golang.org/x/net/http/httpguts"
)

// KeyFromHeader reads a header, raw or as an RFC 8941 string: header:NAME.
const KeyFromHeader KeySourceKind = 1

// headerSource is the header:NAME key source (parseKey, key.go).
type headerSource struct{}

// headerKeySource is the source of the "header" shorthand: [header:NAME].
func headerKeySource(name string) KeySource {
	return KeySource{Kind: KeyFromHeader, Name: http.CanonicalHeaderKey(name)}
}

func (headerSource) kind() KeySourceKind { return KeyFromHeader }
func (headerSource) form() string        { return "header:NAME" }
func (headerSource) fromPayload() bool   { return false }

func (headerSource) parse(s, arg string) (KeySource, error) {
	if arg == "" {
		return KeySource{}, fmt.Errorf("key source %q: header: needs a header name, as in header:Idempotency-Key", s)
	}
	if !httpguts.ValidHeaderFieldName(arg) {
		return KeySource{}, fmt.Errorf("key source %q: %q is not a valid header name", s, arg)
	}
	return headerKeySource(arg), nil
}

func (headerSource) check(k KeySource) error {
	if !httpguts.ValidHeaderFieldName(k.Name) {
		return fmt.Errorf("invalid header name %q", k.Name)
	}
	return nil
}

func (headerSource) arg(k KeySource) string       { return k.Name }
func (headerSource) describe(k KeySource) string  { return "the " + k.Name + " header" }
func (headerSource) header(k KeySource) string    { return k.Name }
func (headerSource) forwarded(k KeySource) string { return k.Name }

func (headerSource) extract(k *KeySource, r *http.Request, _ []byte) (string, error) {
	return parseKey(r.Header, k.Name)
}
