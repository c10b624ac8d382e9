package proxy

import (
	"errors"
	"net/http"

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
	if kk := k.Kind.of(); kk != nil {
		return kk.extract(k, r, body)
	}
	return "", errNoKey
}
