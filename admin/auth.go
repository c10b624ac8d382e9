package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
	"sync/atomic"
)

// Token is the bearer token of the admin API. It may be replaced while the
// listener runs (a reload re-reads admin.token_file); an empty token turns
// /admin/ off.
type Token struct {
	v atomic.Pointer[tokenValue]
}

type tokenValue struct {
	set bool
	sum [sha256.Size]byte
}

// NewToken returns a Token holding s.
func NewToken(s string) *Token {
	t := &Token{}
	t.Set(s)
	return t
}

// Set replaces the token; "" disables the API. Surrounding whitespace is
// not part of it, as in a token file: a token set from a Secret written by
// echo ends in a newline, and the credential a request sends is read
// trimmed, so with it the token could never match; a blank token is none.
func (t *Token) Set(s string) {
	s = strings.TrimSpace(s)
	// Only the digest is kept: comparing digests of equal length in
	// constant time leaks neither the token nor its length.
	t.v.Store(&tokenValue{set: s != "", sum: sha256.Sum256([]byte(s))})
}

// Enabled reports whether a token is set.
func (t *Token) Enabled() bool { return t.v.Load().set }

// allows reports whether the request's Authorization header carries the token.
func (t *Token) allows(r *http.Request) bool {
	v := t.v.Load()
	if !v.set {
		return false
	}
	scheme, cred, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(cred)))
	return subtle.ConstantTimeCompare(sum[:], v.sum[:]) == 1
}

// requireToken answers 404 while no token is set (the API does not exist)
// and 401 to a request without the token; it runs next otherwise.
// Unauthorized attempts are counted under op.
func requireToken(t *Token, m *Metrics, op string, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !t.Enabled() {
			http.NotFound(w, r)
			return
		}
		if !t.allows(r) {
			m.count(op, resultUnauthorized)
			w.Header().Set("WWW-Authenticate", `Bearer realm="idempotency-proxy admin"`)
			writeProblem(w, probUnauthorized, "Send the admin token as Authorization: Bearer TOKEN.")
			return
		}
		next(w, r)
	}
}
