package client

import (
	"context"
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // RFC 9562 name-based UUIDs (version 5) are defined over SHA-1; no secrecy is involved.
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// HeaderKey is the request header that carries the idempotency key.
const HeaderKey = "Idempotency-Key"

// maxKeyLen is the proxy's limit on a key (docs/request-handling.md), checked here so a bad key
// fails before anything is sent instead of as a 400 from the server.
const maxKeyLen = 255

// ErrInvalidKey means a caller-supplied key breaks the proxy's key rules,
// which would answer it 400 invalid-key: empty, longer than 255 bytes,
// holding non-printable or non-ASCII characters, a comma (unless sent as an
// RFC 8941 string, "order,42"), or a malformed RFC 8941 string.
var ErrInvalidKey = errors.New("client: invalid idempotency key")

// namespaceURL is RFC 9562's predefined namespace for URL names
// (6ba7b811-9dad-11d1-80b4-00c04fd430c8).
var namespaceURL = [16]byte{0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}

// NewKey returns a random UUIDv4 (RFC 9562 §5.4) from crypto/rand: 122 random
// bits, enough that two operations never share a key by chance.
func NewKey() string {
	var u [16]byte
	// crypto/rand.Read never fails since Go 1.24; it crashes the program
	// rather than return predictable bytes.
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // variant 10 (RFC 9562)
	return format(u)
}

// KeyFor derives a stable key for an operation the caller may resume after a
// restart: the same namespace and operationID always give the same key, so a
// resumed operation is recognised by the server instead of executed again.
//
// The key is a name-based UUIDv5 (RFC 9562 §5.5, SHA-1), computed in two steps
// so it can be reproduced in any language with a UUID library:
//
//	ns  := UUIDv5(NameSpace_URL, namespace)   // e.g. "https://shop.example/orders"
//	key := UUIDv5(ns, operationID)            // e.g. "order-1234/charge"
//
// In Python: uuid.uuid5(uuid.uuid5(uuid.NAMESPACE_URL, namespace), operationID).
// namespace should name the calling application and kind of operation, so ids
// from different systems cannot collide. The key is not secret: anyone who
// knows the operation id can compute it, which is harmless because the proxy
// scopes keys per Authorization.
func KeyFor(namespace, operationID string) string {
	return format(uuidV5(uuidV5(namespaceURL, namespace), operationID))
}

func uuidV5(ns [16]byte, name string) [16]byte {
	h := sha1.New() //nolint:gosec // see import.
	h.Write(ns[:])
	h.Write([]byte(name))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // variant 10 (RFC 9562)
	return u
}

func format(u [16]byte) string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

type keyCtx struct{}

// WithKey returns a context that makes Client.Do use key for its operation
// instead of generating one. A key set in the request's header wins over it.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtx{}, key)
}

// keyFromContext returns the key attached by WithKey, if any.
func keyFromContext(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(keyCtx{}).(string)
	return k, ok
}

// validateKey applies the proxy's key rules (docs/request-handling.md) to a
// caller's key, read as the proxy reads the header: the spaces and tabs
// around it dropped; a key that starts with a quote is an RFC 8941 string,
// its value the key; a raw key holds no comma, which would make it a list.
func validateKey(key string) error {
	v := strings.Trim(key, " \t")
	if strings.HasPrefix(v, `"`) {
		value, err := unquoteKey(v)
		if err != nil {
			return err
		}
		v = value
	} else if i := strings.IndexByte(v, ','); i >= 0 {
		return fmt.Errorf("%w: a comma at offset %d reads as a list of keys; send it as an RFC 8941 string, %s", ErrInvalidKey, i, strconv.Quote(v))
	}
	if v == "" || len(v) > maxKeyLen {
		return fmt.Errorf("%w: length %d, want 1..%d", ErrInvalidKey, len(v), maxKeyLen)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: non-printable byte at offset %d", ErrInvalidKey, i)
		}
	}
	return nil
}

// unquoteKey reads s, which starts with a quote, as one RFC 8941 §3.3.3
// string and nothing after it.
func unquoteKey(s string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			i++
			if i == len(s) || (s[i] != '"' && s[i] != '\\') {
				return "", fmt.Errorf("%w: in an RFC 8941 string a backslash escapes only a quote or a backslash", ErrInvalidKey)
			}
			b.WriteByte(s[i])
		case '"':
			if i != len(s)-1 {
				return "", fmt.Errorf("%w: text after the RFC 8941 string's closing quote", ErrInvalidKey)
			}
			return b.String(), nil
		default:
			b.WriteByte(c)
		}
	}
	return "", fmt.Errorf("%w: an RFC 8941 string without its closing quote", ErrInvalidKey)
}
