package proxy

import (
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/idempotency-proxy/idempotency-proxy/internal/graphqlop"
)

// A route with graphql: true protects GraphQL mutations only
// (docs/request-handling.md, "GraphQL"): identify reads the body of a
// protected request as a GraphQL request (internal/graphqlop) before its
// key.
//
//   - A query, a subscription, a batch of them, or a document with no
//     operation passes through, unrecorded (outcome passthrough).
//   - A persisted query sent by its hash alone may be a mutation: it is
//     protected as one, known by its hash, and the server's
//     PersistedQueryNotFound to it releases its key (graphqlReleased).
//     Sent with its document, it is read by its document and known by
//     its hash, so the two attempts of one operation are one request.
//   - A mutation's key is its @idempotent(key: …) directive's, else the
//     route's key sources'; its fingerprint hashes the document, the
//     operation name and the variables in canonical JSON, beside the
//     method, host, path, query and fingerprint_headers.
//   - A request that can be read two ways (several operations holding a
//     mutation, a batch holding one, an operationName naming no operation,
//     two directive keys, a repeated JSON member name, a mutation in the
//     query string of a method other than GET, protected or not) is
//     refused ambiguous-body; a mutation sent with GET, ambiguous-method.
//   - A body that is not a GraphQL request the proxy reads (another
//     content type, a document that does not parse) is protected as any
//     request on the route.
//
// The proxy's own answers on the route are GraphQL responses
// (problemjson.WriteGraphQL).

// graphqlReading is how a GraphQL route read a request: whether the
// proxy answers it in GraphQL.
type graphqlReading uint8

const (
	graphqlNone      graphqlReading = iota // not on a GraphQL route
	graphqlRoute                           // on one: the proxy answers in GraphQL
	graphqlPersisted                       // a persisted query sent by its hash alone, on one
)

// graphqlInQueryString refuses a request on a GraphQL route whose query
// string carries a mutation, whatever its method and whether the route
// protects it. GraphQL over HTTP forbids a mutation over GET, so a server
// that follows it refuses it too (ambiguous-method); graphql-go/handler
// and express-graphql run the query string's query before the body's
// whatever the method (ambiguous-body). Passed through, either would run
// the mutation unprotected. It reports whether it answered.
func (h *Handler) graphqlInQueryString(w http.ResponseWriter, q *request) bool {
	if !graphqlop.MutationInQuery(q.in.URL.RawQuery) {
		return false
	}
	q.graphql = graphqlRoute
	if q.target.method == http.MethodGet {
		h.refuse(w, q, failMutationOverGET, nil)
		return true
	}
	h.refuse(w, q, failAmbiguousGraphQL, errMutationInQueryString)
	return true
}

// errMutationInQueryString is why a request whose query string carries a
// mutation, on a method other than GET, is refused: graphql-go/handler and
// express-graphql read the query string's query before the body, and
// graphql-http the body alone, so the proxy cannot tell which one the
// server runs.
var errMutationInQueryString = &graphqlop.Error{Err: graphqlop.ErrAmbiguous, Reason: "the query string carries a mutation beside the body, and servers differ on which of the two they run (send the mutation in the body alone)"}

// readGraphQL reads the body of a protected request on a GraphQL route
// and answers what needs no key: a query passes through, an ambiguous
// request or an unreadable directive key is refused; ok is false then.
// Otherwise the request goes on as any request does, its body read; for a
// mutation, form is its canonical form, which the fingerprint hashes
// instead of the body, and key its directive's key ("" for none).
func (h *Handler) readGraphQL(w http.ResponseWriter, q *request) (form []byte, key string, ok bool) {
	if h.graphqlInQueryString(w, q) {
		return nil, "", false
	}
	q.graphql = graphqlRoute
	if !h.readBody(w, q) {
		return nil, "", false
	}
	// A body sent compressed is read decoded, as express-graphql reads
	// it (inflated); it is forwarded as sent.
	body := q.body
	if plain := inflated(q.in, q.body, q.route.policy.MaxRequestBody); plain != nil {
		body = plain
	}
	op, err := graphqlop.ReadBody(q.in.Header.Get("Content-Type"), body)
	switch {
	case err == graphqlop.ErrNotGraphQL:
		return nil, "", true
	case errors.Is(err, graphqlop.ErrAmbiguous):
		h.refuse(w, q, failAmbiguousGraphQL, err)
		return nil, "", false
	case err != nil:
		h.refuse(w, q, failInvalidKey, err)
		return nil, "", false
	case op.Kind == graphqlop.Persisted:
		q.graphql = graphqlPersisted
	case op.Kind != graphqlop.Mutation:
		setBody(q.in, q.body, nil)
		h.passThrough(w, q, q.in)
		return nil, "", false
	}
	form, err = op.Canonical()
	if err != nil { // variables ReadBody accepted: cannot happen
		h.refuse(w, q, failAmbiguousGraphQL, err)
		return nil, "", false
	}
	if !op.HasKey {
		return form, "", true
	}
	if err := checkKey(op.Key); err != nil {
		h.refuse(w, q, failInvalidKey, &graphqlop.Error{Err: graphqlop.ErrInvalidKey, Reason: "@" + graphqlop.DirectiveName + "(key:): " + err.Error()})
		return nil, "", false
	}
	return form, op.Key, true
}

// graphqlReleased reports whether the answer to request q, a persisted
// query sent by its hash alone, is the server's PersistedQueryNotFound:
// nothing ran, and the client sends the hash again with its document, the
// same request, which must find the key free. An answer the server
// compressed (gzip or deflate, for a client that accepts it) is read
// decoded. When it is, it sets *outcome.
func graphqlReleased(q *request, outcome *Outcome) bool {
	c := &q.capture
	if c.omitted {
		return false
	}
	body := c.body
	if ce := c.hdr["Content-Encoding"]; len(ce) > 0 {
		body = decodedRefusal(ce, body)
	}
	if body == nil || !graphqlop.PersistedQueryNotFound(body) {
		return false
	}
	*outcome = OutcomeReleased
	return true
}

// maxRefusal bounds the decoded size of an answer read as a possible
// PersistedQueryNotFound, a few hundred bytes: a larger one is not.
const maxRefusal = 64 << 10

// decodedRefusal is body, an answer whose Content-Encoding field lines are
// ce, decoded, or nil when it is in a coding the proxy does not decode
// (replaydecode.go), does not decode, or decodes to over maxRefusal bytes.
func decodedRefusal(ce []string, body []byte) []byte {
	if len(ce) != 1 || !decodable(strings.TrimSpace(ce[0])) {
		return nil
	}
	d, err := decoder(strings.TrimSpace(ce[0]), body)
	if err != nil {
		return nil
	}
	plain, err := io.ReadAll(io.LimitReader(d, maxRefusal+1))
	if err != nil || len(plain) > maxRefusal {
		return nil
	}
	return plain
}
