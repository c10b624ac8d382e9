// Package graphqlop reads what a GraphQL-over-HTTP request asks the way a
// GraphQL server will, for the proxy's GraphQL routes: which operation it
// runs (query, mutation or subscription), the key of a mutation's
// @idempotent(key: …) directive, and the canonical form its fingerprint
// hashes (the document, the operation name and the variables in canonical
// JSON). Documents are parsed by github.com/vektah/gqlparser/v2, gqlgen's
// parser; JSON by internal/jsonread, which refuses a body that repeats a
// member name.
//
// A request that can be read two ways — a document of several operations
// holding a mutation, a batch holding a mutation, an operationName naming
// no operation, two different directive keys — is an *Error wrapping
// ErrAmbiguous. A body that is not a GraphQL request this package reads
// (another content type, a document that does not parse, a persisted
// query without its document) is ErrNotGraphQL: the proxy then protects it
// as any request on the route.
package graphqlop
