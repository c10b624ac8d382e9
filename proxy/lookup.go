package proxy

import (
	"net/http"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// lookup is what q's record keeps so that an operator finds it by the raw
// key alone (GET /admin/keys?key=): the key without its scope, and the
// scope values without the key. The key_hash hashes both together, so
// without the client's Authorization it cannot be computed.
func (q *request) lookup() store.Lookup {
	return store.Lookup{Key: store.LookupKey(q.key), Scope: q.scopeHash()}
}

// scopeHash is scopeHash of q's scope values, hashed once a request: the
// record's lookup and key churn both want it. A route without scope
// headers has one scope, hashed when the route is built.
func (q *request) scopeHash() [16]byte {
	if len(q.route.scope) == 0 {
		return q.route.unscoped
	}
	if !q.scoped {
		q.scopeSum, q.scoped = scopeHash(q.in, q.route.scope), true
	}
	return q.scopeSum
}

// scopeHash hashes the scope values of r as storageKeyFrom does, alone:
// two records with the same one were sent with the same credentials.
func scopeHash(r *http.Request, scope []ScopeHeader) [16]byte {
	hs := getHasher()
	hs.scope(r, scope)
	sum := hs.finish(nil)
	return [16]byte(sum[:16])
}

// scope adds the scope values of r to hs, as scopeHash hashes them.
func (hs *hasher) scope(r *http.Request, scope []ScopeHeader) {
	hs.field("scope")
	for _, p := range scope {
		if p.Cookie != "" {
			hs.cookie(r.Header["Cookie"], p.Cookie)
			continue
		}
		hs.values(r.Header[p.Header])
	}
}
