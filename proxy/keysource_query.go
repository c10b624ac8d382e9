package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// KeyFromQuery reads a query parameter that must appear once: query:NAME.
const KeyFromQuery KeySourceKind = 2

// querySource is the query:NAME key source.
type querySource struct{}

func (querySource) kind() KeySourceKind { return KeyFromQuery }
func (querySource) form() string        { return "query:NAME" }
func (querySource) fromPayload() bool   { return false }

func (querySource) parse(s, arg string) (KeySource, error) {
	if arg == "" {
		return KeySource{}, fmt.Errorf("key source %q: query: needs a parameter name, as in query:idempotency_key", s)
	}
	return KeySource{Kind: KeyFromQuery, Name: arg}, nil
}

func (querySource) check(k KeySource) error {
	if k.Name == "" {
		return errors.New("query: needs a parameter name")
	}
	return nil
}

func (querySource) arg(k KeySource) string      { return k.Name }
func (querySource) describe(k KeySource) string { return "the " + k.Name + " query parameter" }

// An operator gives a query parameter's key as it is; no header carries it.
func (querySource) header(KeySource) string    { return "" }
func (querySource) forwarded(KeySource) string { return "" }

func (querySource) extract(k *KeySource, r *http.Request, _ []byte) (string, error) {
	return queryKey(r.URL.RawQuery, k.Name)
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
