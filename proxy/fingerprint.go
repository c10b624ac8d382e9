package proxy

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"hash/maphash"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/pathread"
	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// fingerprintAndKey fills what q is known by once it has a key: its
// fingerprint, its storage key and the description its lease and record
// give operators, and notes its key churn. The body was read to its end,
// so the trailers are known. It fails, before anything is locked, for a
// JSON body the fingerprint cannot read one way. form, when not nil, is
// hashed in place of the body: a GraphQL mutation's canonical form
// (graphql.go), a compressed gRPC message decompressed (grpc.go).
func (h *Handler) fingerprintAndKey(q *request, form []byte) error {
	r, pol := q.in, &q.route.policy
	host := normalHost(r.Host) // in the lease's description
	fpHost := host
	if !pol.FingerprintHost {
		fpHost = "" // fingerprint_host: false leaves the host out
	}
	var err error
	if form != nil {
		q.fp = fingerprint(r, fpReading(&q.target, pol.PathCase), fpHost, form, pol.FingerprintHeaders)
	} else if q.fp, err = bodyFingerprint(r, fpReading(&q.target, pol.PathCase), fpHost, q.body, pol); err != nil {
		return err
	}
	q.keyHash = storageKeyFrom(r, keyReading(&q.target, pol.PathCase), q.key, q.route.scope, q.keyFrom, fpHost)
	q.desc = q.described(host)
	if q.route.churn != nil {
		id, scopeKey := churnIdentity(q.fp, r, q.route.scope)
		h.noteChurn(q, id, scopeKey)
	}
	return nil
}

// hasher is a reusable SHA-256 with a scratch buffer for the small parts of
// a request, so hashing allocates nothing.
type hasher struct {
	h   hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

var hashers = sync.Pool{New: func() any { return &hasher{h: sha256.New(), buf: make([]byte, 0, 512)} }}

func getHasher() *hasher {
	hs := hashers.Get().(*hasher)
	hs.h.Reset()
	hs.buf = hs.buf[:0]
	return hs
}

func (hs *hasher) field(s string) {
	hs.length(len(s))
	hs.buf = append(hs.buf, s...)
}

func (hs *hasher) length(n int) {
	hs.buf = binary.BigEndian.AppendUint64(hs.buf, uint64(n))
}

// release returns hs to the pool without hashing what it holds.
func (hs *hasher) release() {
	if cap(hs.buf) <= 64<<10 { // do not pool a buffer a huge header grew
		hashers.Put(hs)
	}
}

// finish hashes the buffered parts and returns the pooled hasher; the
// digest is in the returned array.
func (hs *hasher) finish() [sha256.Size]byte {
	hs.h.Write(hs.buf)
	hs.h.Sum(hs.sum[:0])
	sum := hs.sum
	if cap(hs.buf) <= 64<<10 { // do not pool a buffer a huge header grew
		hashers.Put(hs)
	}
	return sum
}

// fingerprint is the SHA-256 of the parts of a request that must be equal
// for a retry to be the same operation: method, host, path, query, the
// configured headers, the body and the request trailers. Method and path
// are as the request is read (at, fpReading: the method as sent with any
// override headers, the normal path). Every part is
// length-prefixed so that no two different requests hash the same bytes.
//
// host is the normalised request host (normalHost), or "" to leave it out.
// A left-out host hashes nothing, so such fingerprints equal those of
// versions that never hashed the host; a host never starts with '/' as a
// path does, so the two forms cannot be confused. Trailers likewise hash
// nothing when there are none. The body must have been read to its end:
// only then are the trailers known.
func fingerprint(r *http.Request, at readAs, host string, body []byte, headers []string) store.Fingerprint {
	hs := getHasher()
	hs.field(at.method)
	if host != "" {
		hs.field(host)
	}
	hs.field(at.path)
	// open is where the first bytes start that may carry a secret (the
	// query, a header value, the body): no hash state is kept of them.
	open := -1
	if r.URL.RawQuery != "" {
		open = len(hs.buf) + 8
	}
	hs.field(r.URL.RawQuery)
	for _, name := range headers {
		hs.field(name)
		values := r.Header[name]
		if open < 0 && len(values) > 0 {
			open = len(hs.buf) + 16 // after the count and the first value's length
		}
		hs.values(values)
	}
	hs.length(len(body))
	if open < 0 {
		open = len(hs.buf)
	}
	hs.writePrefixed(hs.buf, open)
	hs.h.Write(body)
	hs.buf = hs.buf[:0]
	hs.trailers(r.Trailer)
	return hs.finish()
}

func (hs *hasher) values(values []string) {
	hs.length(len(values))
	for _, v := range values {
		hs.field(v)
	}
}

// trailers adds the request trailers that carry a value, by name in sorted
// order (the map has none). Declared trailers that never came add nothing.
func (hs *hasher) trailers(t http.Header) {
	n := 0
	for _, v := range t {
		if len(v) > 0 {
			n++
		}
	}
	if n == 0 {
		return
	}
	names := make([]string, 0, n)
	for k, v := range t {
		if len(v) > 0 {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	hs.length(n)
	for _, name := range names {
		hs.field(name)
		hs.values(t[name])
	}
}

// scratches recycle the buffers canonical JSON fingerprints are built in.
var scratches = sync.Pool{New: func() any { return new([]byte) }}

// bodyFingerprint is fingerprint with the body hashed as the route's
// fingerprint_json and fingerprint_ignore say: as sent, or in canonical
// form without the ignored members. A body that is not JSON is hashed as
// sent, never refused; one that repeats a member name is (fingerprintBody).
func bodyFingerprint(r *http.Request, at readAs, host string, body []byte, pol *Policy) (store.Fingerprint, error) {
	if pol.FingerprintJSON != FingerprintCanonical && len(pol.FingerprintIgnore) == 0 {
		return fingerprint(r, at, host, body, pol.FingerprintHeaders), nil
	}
	buf := scratches.Get().(*[]byte)
	hashed, grown, err := fingerprintBody(*buf, body, pol.FingerprintJSON, pol.FingerprintIgnore)
	var fp store.Fingerprint
	if err == nil {
		fp = fingerprint(r, at, host, hashed, pol.FingerprintHeaders)
	}
	if cap(grown) <= 1<<20 { // do not keep what one huge body grew
		*buf = grown[:0]
		scratches.Put(buf)
	}
	return fp, err
}

// normalHost is the host a request is fingerprinted and routed by: the
// host name the client addressed (the Host header, or the host of an
// absolute-form request target, which net/http puts in r.Host),
// lower-cased, without a trailing dot and without the port:
// "A.Example.:8080" is "a.example". The port is left out as route patterns
// leave it out, and because replicas reached on different ports of one
// name are one service: a retry sent to another replica must replay, not
// get 422. It allocates only when it lower-cases.
func normalHost(host string) string {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		host = host[:i]
	}
	return strings.ToLower(strings.TrimSuffix(host, "."))
}

// readAs is the method and escaped path a fingerprint or a key namespace
// hashes.
type readAs struct{ method, path string }

// fpReading is what the fingerprint of a request read as t, on a route
// with path_case pc, hashes for its method and path: the method as sent
// with any override headers (an upstream may treat "post" and POST
// apart), and the normal path, lower-cased under path_case: insensitive.
// Repeated slashes stay: some upstreams keep them apart.
func fpReading(t *target, pc PathCase) readAs {
	p := t.path
	if pc == PathCaseInsensitive {
		p = lowerASCII(p)
	}
	return readAs{t.fpMethod, p}
}

// keyReading is the method and path that namespace a key derived from the
// payload (json:, body_sha256) of a request read as t, on a route with
// path_case pc: the ones the route matched, the broadest reading, so that
// no spelling of one operation gets a second key. A spelling that is
// another operation to the upstream then shares the key and differs in
// its fingerprint: a 422, never a second execution.
func keyReading(t *target, pc PathCase) readAs {
	p := t.routed
	if p == "" {
		p = t.path // a target no route table read
	}
	p = pathread.Clean(p)
	if pc == PathCaseInsensitive {
		p = lowerASCII(p)
	}
	return readAs{t.method, p}
}

// storageKeyFrom names a key in the store: a hash of the scope values and
// the idempotency key, found by a source of kind from, so one client can
// never be replayed another's response and neither Authorization values,
// cookies nor raw keys are stored. It is the key_hash of logs and the key
// API.
//
// A key derived from the payload (json:, body_sha256) names an operation
// only together with where it was sent: order 42 posted to /orders and to
// /orders/cancel are two operations, not one key reused with another
// payload. Such keys are namespaced by the source's kind, the method, the
// host (host: the normalised host, "" under fingerprint_host: false) and
// the path (docs/design-decisions.md). A key the client chose (header:,
// query:) is not: reused elsewhere it is a mismatch (422). The namespace
// is hashed after the key, so the storage keys of client-chosen keys are
// those of earlier versions.
func storageKeyFrom(r *http.Request, at readAs, key string, scope []ScopeHeader, from KeySourceKind, host string) string {
	hs := getHasher()
	hs.scopeValues(r, scope)
	hs.field(key)
	// The kind's word and payload flag, as its registration worked them
	// out once (kinds, keysource.go).
	if kind := kinds[from]; kind.payload {
		hs.field(kind.word)
		hs.field(at.method)
		hs.field(host)
		hs.field(at.path)
	}
	sum := hs.finish()
	// 128 bits: collisions are out of reach, and the key stays short in Redis.
	return hexKey([16]byte(sum[:16]))
}

// hexKey is hex.EncodeToString(b[:]), a byte's two digits at a time.
func hexKey(b [16]byte) string {
	var out [32]byte
	for i, c := range b {
		out[2*i], out[2*i+1] = hexPairs[c][0], hexPairs[c][1]
	}
	return string(out[:])
}

// hexPairs are the two lower-case hex digits of each byte.
var hexPairs = func() (t [256][2]byte) {
	const digits = "0123456789abcdef"
	for c := range t {
		t[c] = [2]byte{digits[c>>4], digits[c&0xF]}
	}
	return t
}()

// described is what the request's lease and record say of it, for
// operators: never its query or body. host is its normalHost.
func (q *request) described(host string) store.Request {
	return store.Request{
		Method:    q.in.Method,
		Host:      host,
		Path:      q.in.URL.Path,
		Route:     q.route.label,
		StartedAt: q.start.Truncate(time.Millisecond).UTC(),
	}
}

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
	sum := hs.finish()
	return [16]byte(sum[:16])
}

// churnIdentity is what key churn (churn.go) knows a request by: id, its
// fingerprint under its scope values, and scopeKey, a seeded hash of the
// scope values alone, under which the churn remembers their scope_hash.
// The scope values are encoded once, as scopeHash encodes them, for both.
func churnIdentity(fp store.Fingerprint, r *http.Request, scope []ScopeHeader) (id churnID, scopeKey uint64) {
	hs := getHasher()
	hs.scope(r, scope)
	id, scopeKey = churnIDOf(fp, hs.buf), maphash.Bytes(churnSeeds[0], hs.buf)
	hs.release()
	return id, scopeKey
}

// churnSeeds key the two halves of a churn id. The id never leaves the
// process, so a seeded hash does, where a SHA-256 on every keyed request
// cost more than the rest of the churn count.
var churnSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// churnIDOf is the id of a request's fingerprint under its scope values
// (encoded as hasher.scope writes them): 128 bits of two seeded hashes,
// so two requests share one by chance about once in 2^64 pairs.
func churnIDOf(fp [32]byte, scope []byte) churnID {
	var id churnID
	for i, seed := range churnSeeds {
		var h maphash.Hash
		h.SetSeed(seed)
		h.Write(fp[:])
		h.Write(scope)
		binary.LittleEndian.PutUint64(id[8*i:], h.Sum64())
	}
	return id
}

// scope adds the scope values of r to hs, as scopeHash hashes them.
func (hs *hasher) scope(r *http.Request, scope []ScopeHeader) {
	hs.field("scope")
	hs.scopeValues(r, scope)
}

// scopeValues adds r's values of each scope header, or cookie, in the
// order the route names them: what binds a storage key, a churn identity
// or a status URL to the tenant that sent them.
func (hs *hasher) scopeValues(r *http.Request, scope []ScopeHeader) {
	for _, p := range scope {
		if p.Cookie != "" {
			hs.cookie(r.Header["Cookie"], p.Cookie)
			continue
		}
		hs.values(r.Header[p.Header])
	}
}

// cookie adds the values of every cookie called name, in the order sent,
// without parsing the other cookies into objects.
func (hs *hasher) cookie(lines []string, name string) {
	n := 0
	forEachCookie(lines, name, func(string) { n++ })
	hs.length(n)
	forEachCookie(lines, name, func(v string) { hs.field(v) })
}

// forEachCookie calls f with the value of each cookie called name in the
// Cookie header lines ("a=1; b=2").
func forEachCookie(lines []string, name string, f func(value string)) {
	for _, line := range lines {
		for line != "" {
			var pair string
			pair, line, _ = strings.Cut(line, ";")
			k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
			// net/http trims the name as most parsers do: "name =v" is
			// the cookie upstream, so it must scope here too.
			if ok && textproto.TrimString(k) == name {
				f(v)
			}
		}
	}
}
