package proxy

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/idempotency-proxy/idempotency-proxy/internal/jsonread"
)

// KeyFromJSON reads the string or integer at a JSON pointer in the body:
// json:/pointer.
const KeyFromJSON KeySourceKind = 3

// jsonSource is the json:/pointer key source.
type jsonSource struct{}

func (jsonSource) kind() KeySourceKind { return KeyFromJSON }
func (jsonSource) form() string        { return "json:/pointer" }
func (jsonSource) fromPayload() bool   { return true }

func (jsonSource) parse(s, arg string) (KeySource, error) {
	p, err := jsonread.ParsePointer(arg)
	if err != nil {
		return KeySource{}, fmt.Errorf("key source %q: %w", s, err)
	}
	if p.IsRoot() {
		return KeySource{}, fmt.Errorf("key source %q: json: needs a pointer to a member, as in json:/id", s)
	}
	return KeySource{Kind: KeyFromJSON, Pointer: p}, nil
}

func (jsonSource) check(k KeySource) error {
	if k.Pointer.IsRoot() {
		return errors.New("json: needs a pointer to a member, as in json:/id")
	}
	return nil
}

func (jsonSource) arg(k KeySource) string { return k.Pointer.String() }
func (jsonSource) describe(k KeySource) string {
	return "a JSON string or integer at " + k.Pointer.String() + " in the body"
}
func (jsonSource) header(KeySource) string    { return "" }
func (jsonSource) forwarded(KeySource) string { return "" }

func (jsonSource) extract(k *KeySource, _ *http.Request, body []byte) (string, error) {
	return jsonKey(body, k.Pointer)
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
