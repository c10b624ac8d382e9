package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/idempotency-proxy/idempotency-proxy/internal/jsonread"
	"github.com/idempotency-proxy/idempotency-proxy/internal/problemjson"
)

// errNotProtected is returned by KeyHashFrom for a request the live routes do
// not protect: it would be proxied without touching the store.
var errNotProtected = errors.New("this method and path are not protected by any route")

// errRefused is returned by KeyHashFrom for a request the proxy refuses
// before it looks for a key (400 ambiguous-path).
var errRefused = errors.New("the proxy refuses this request")

// KeyHashFrom returns the storage key (the key_hash in logs and in the
// admin API) a request like r would use under the live configuration,
// computed as the request path computes it: its
// route's scope headers namespace the key, and a key derived from the
// payload (json:, body_sha256) is namespaced by method, host and path too.
//
// source names which of the route's key sources found key, in its
// configuration form ("json:/order_id"); "" means the route's first. When
// key is "", the key is found in r itself — its headers, its query, its
// body (r.Body, read up to max_request_body) — by the route's sources in
// order, exactly as the request path finds it.
func (h *Handler) KeyHashFrom(r *http.Request, key, source string) (string, error) {
	t := readTarget(r)
	routes := h.routes.Load()
	var read []byte // a form body read whole for its _method parameters
	if routes.methodsMatter && t.own == http.MethodPost {
		var whole bool
		if read, whole = readMethodParams(r, &t, routes.maxBody, nil); !whole {
			read = nil
		}
	}
	rt := routes.match(r, &t)
	if t.refuse != 0 {
		p, detail, _ := problemFor(&request{in: r, identity: identity{target: t, route: rt}}, t.refuse, nil)
		return "", fmt.Errorf("%w: %s", errRefused, strings.TrimPrefix(p.Type, problemjson.Base)+": "+detail)
	}
	if !rt.protectsTarget(&t) {
		return "", errNotProtected
	}
	var from KeySourceKind
	if key == "" {
		var body []byte
		if read != nil && int64(len(read)) <= rt.policy.MaxRequestBody {
			body = read
		} else if r.Body != nil {
			var err error
			if body, err = readBody(r, rt.policy.MaxRequestBody); err != nil {
				return "", err
			}
		}
		k, kind, err := requestKeyFromDecoded(r, rt.sources, body, inflated(r, body, rt.policy.MaxRequestBody), true)
		if err == errNoKey {
			return "", fmt.Errorf("%w: the route takes it from %s", errNoKey, describeKeySources(rt.sources))
		}
		if errors.Is(err, jsonread.ErrDuplicateName) {
			// The request path refuses such a body before it has a key.
			p, detail, _ := problemFor(&request{in: r, identity: identity{target: t, route: rt}}, failAmbiguousBody, err)
			return "", fmt.Errorf("%w: %s", errRefused, strings.TrimPrefix(p.Type, problemjson.Base)+": "+detail)
		}
		if err != nil {
			return "", err
		}
		key, from = k, kind
	} else {
		src, err := routeSource(rt, source)
		if err != nil {
			return "", err
		}
		// A header's key as a client would send it: raw or an RFC 8941
		// string, surrounding spaces ignored, checked like the request path.
		if src.header() != "" {
			if key, err = parseKey(http.Header{"K": {key}}, "K"); err != nil {
				return "", err
			}
		} else if err := checkKey(key); err != nil {
			return "", err
		}
		from = src.Kind
	}
	var host string
	if rt.policy.FingerprintHost {
		host = normalHost(r.Host)
	}
	return storageKeyFrom(r, keyReading(&t, rt.policy.PathCase), key, rt.scope, from, host), nil
}

// routeSource returns the route's key source written as source, or its
// first source when source is "".
func routeSource(rt *route, source string) (KeySource, error) {
	if source == "" {
		return rt.sources[0], nil
	}
	want, err := parseKeySource(source)
	if err != nil {
		return KeySource{}, err
	}
	for _, k := range rt.sources {
		if k.String() == want.String() {
			return k, nil
		}
	}
	return KeySource{}, fmt.Errorf("the route takes keys from %s, not %s", describeKeySources(rt.sources), source)
}
