package proxy

import (
	"errors"
	"net/http"
)

// ErrNotProtected is returned by KeyHash for a request the live routes do
// not protect: it would be proxied without touching the store.
var ErrNotProtected = errors.New("this method and path are not protected by any route")

// KeyHash returns the storage key (the key_hash in logs and in the admin
// API) that a request like r carrying the idempotency key would use under
// the live configuration: its route's scope headers namespace the key as on
// the request path. Only the method, host, path and headers of r are read.
func (h *Handler) KeyHash(r *http.Request, key string) (string, error) {
	rt := h.routes.Load().match(r)
	if !rt.protects(r.Method) {
		return "", ErrNotProtected
	}
	// The key as a client would send it in the header: raw or an RFC 8941
	// string, surrounding spaces ignored, checked like the request path.
	key, err := parseKey(http.Header{"K": {key}}, "K")
	if err != nil {
		return "", err
	}
	return storageKey(r, key, rt.scope), nil
}
