package proxy

import (
	"errors"
	"net/http"
	"strings"
)

// maxKeyLen is the longest key accepted, in bytes, without RFC 8941 quotes.
const maxKeyLen = 255

var (
	errNoKey        = errors.New("no idempotency key")
	errEmptyKey     = errors.New("the idempotency key is empty")
	errKeyTooLong   = errors.New("the idempotency key is longer than 255 bytes")
	errKeyCharset   = errors.New("the idempotency key contains a non-printable or non-ASCII character")
	errKeyMultiple  = errors.New("more than one idempotency key was sent")
	errKeyMalformed = errors.New("the idempotency key is a malformed RFC 8941 string")
)

// parseKey returns the request's idempotency key. The key may be sent raw
// (Idempotency-Key: 8e03…) or as an RFC 8941 sf-string (Idempotency-Key:
// "8e03…"); both name the same key. Repeated header lines, or a list, are
// rejected rather than guessed at.
func parseKey(h http.Header, name string) (string, error) {
	values := h[name]
	switch len(values) {
	case 0:
		return "", errNoKey
	case 1:
	default:
		return "", errKeyMultiple
	}
	v := strings.Trim(values[0], " \t")
	if v == "" {
		return "", errEmptyKey
	}
	var key string
	if v[0] == '"' {
		k, rest, err := parseSFString(v)
		if err != nil {
			return "", err
		}
		if rest = strings.TrimLeft(rest, " \t"); rest != "" {
			if rest[0] == ',' {
				return "", errKeyMultiple
			}
			return "", errKeyMalformed
		}
		key = k
	} else {
		if strings.IndexByte(v, ',') >= 0 {
			return "", errKeyMultiple
		}
		key = v
	}
	if err := checkKey(key); err != nil {
		return "", err
	}
	return key, nil
}

func checkKey(key string) error {
	if key == "" {
		return errEmptyKey
	}
	if len(key) > maxKeyLen {
		return errKeyTooLong
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return errKeyCharset
		}
	}
	return nil
}

// parseSFString parses an RFC 8941 §3.3.3 string at the start of s and
// returns its value and the text after the closing quote.
func parseSFString(s string) (value, rest string, err error) {
	// Fast path: no escapes, which is every key a UUID generator makes.
	if end := strings.IndexByte(s[1:], '"'); end >= 0 && strings.IndexByte(s[1:end+1], '\\') < 0 {
		value = s[1 : end+1]
		for i := 0; i < len(value); i++ {
			if c := value[i]; c < 0x20 || c > 0x7e {
				return "", "", errKeyCharset
			}
		}
		return value, s[end+2:], nil
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i == len(s) || (s[i] != '"' && s[i] != '\\') {
				return "", "", errKeyMalformed
			}
			b.WriteByte(s[i])
		case c == '"':
			return b.String(), s[i+1:], nil
		case c < 0x20 || c > 0x7e:
			return "", "", errKeyCharset
		default:
			b.WriteByte(c)
		}
	}
	return "", "", errKeyMalformed
}
