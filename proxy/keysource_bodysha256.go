package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
)

// KeyFromBodySHA256 uses the hex SHA-256 of a non-empty body: body_sha256.
const KeyFromBodySHA256 KeySourceKind = 4

// bodySHA256Source is the body_sha256 key source.
type bodySHA256Source struct{}

func (bodySHA256Source) kind() KeySourceKind { return KeyFromBodySHA256 }
func (bodySHA256Source) form() string        { return "body_sha256" }
func (bodySHA256Source) fromPayload() bool   { return true }

// parse is never asked: the form takes no argument.
func (bodySHA256Source) parse(s, _ string) (KeySource, error) {
	return KeySource{}, fmt.Errorf("key source %q: body_sha256 takes no argument", s)
}

func (bodySHA256Source) check(KeySource) error      { return nil }
func (bodySHA256Source) arg(KeySource) string       { return "" }
func (bodySHA256Source) describe(KeySource) string  { return "a body" }
func (bodySHA256Source) header(KeySource) string    { return "" }
func (bodySHA256Source) forwarded(KeySource) string { return "" }

func (bodySHA256Source) extract(_ *KeySource, _ *http.Request, body []byte) (string, error) {
	if len(body) == 0 {
		// Every body-less request would share one key, and differ
		// only in path: absent, not a key.
		return "", errNoKey
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:]), nil
}
