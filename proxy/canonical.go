package proxy

import (
	"errors"
	"fmt"

	"github.com/idempotency-proxy/idempotency-proxy/internal/enum"
	"github.com/idempotency-proxy/idempotency-proxy/internal/jsonread"
)

// FingerprintJSON says how a JSON request body enters the payload
// fingerprint (docs/request-handling.md, "What the fingerprint covers").
type FingerprintJSON uint8

const (
	// FingerprintRaw hashes the body's bytes as sent.
	FingerprintRaw FingerprintJSON = iota
	// FingerprintCanonical hashes a JSON body with its object members
	// sorted by name and insignificant whitespace dropped, so a client that
	// re-serialises the same document for a retry still matches. Strings
	// and numbers are hashed as sent: "1.0" and "1" stay different, as they
	// may be to the upstream.
	FingerprintCanonical
)

var fingerprintJSONWords = enum.Words{"raw", "canonical"}

// String returns the configuration form: "raw" or "canonical".
func (f FingerprintJSON) String() string { return fingerprintJSONWords.Name(int(f)) }

// MarshalText returns the configuration form.
func (f FingerprintJSON) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// UnmarshalText parses "raw" or "canonical".
func (f *FingerprintJSON) UnmarshalText(b []byte) error {
	return parseWord(f, fingerprintJSONWords, b)
}

// maxFingerprintIgnore is the most pointers one route's fingerprint_ignore
// may list.
const maxFingerprintIgnore = jsonread.MaxIgnore

// checkFingerprintIgnore reports why ptrs cannot be left out of a route's
// fingerprint.
func checkFingerprintIgnore(ptrs []jsonread.Pointer) error {
	if len(ptrs) > maxFingerprintIgnore {
		return fmt.Errorf("%d pointers: at most %d", len(ptrs), maxFingerprintIgnore)
	}
	for _, p := range ptrs {
		if p.IsRoot() {
			// A key reused with any other body would replay this response.
			return errors.New(`the empty pointer "" names the whole body, which must stay in the fingerprint`)
		}
	}
	return nil
}

// fingerprintBody returns the bytes the fingerprint hashes for body: body
// itself under FingerprintRaw with nothing to ignore, or when body is not
// valid JSON (it is hashed raw, never refused); otherwise its canonical
// form without the ignored members, appended to scratch[:0]. grown is
// scratch with whatever capacity that took, for the caller to reuse. A
// JSON body that repeats a member name has no canonical form that means
// one thing: err is a *jsonread.DuplicateNameError, and the request is
// refused.
func fingerprintBody(scratch, body []byte, mode FingerprintJSON, ignore []jsonread.Pointer) (hashed, grown []byte, err error) {
	if mode != FingerprintCanonical && len(ignore) == 0 {
		return body, scratch, nil
	}
	out, err := jsonread.AppendCanonical(scratch[:0], body, ignore)
	switch {
	case errors.Is(err, jsonread.ErrDuplicateName):
		return nil, out, err
	case err != nil:
		return body, out, nil
	}
	return out, out, nil
}
