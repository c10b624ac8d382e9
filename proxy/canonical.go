package proxy

import (
	"errors"
	"fmt"

	"github.com/idempotency-proxy/idempotency-proxy/internal/jsonread"
)

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
