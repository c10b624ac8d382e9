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
// no operation, two different directive keys, a persisted query's hash
// that is not its document's — is an *Error wrapping ErrAmbiguous. A
// persisted query sent by its hash alone is of kind Persisted, known by
// its hash as a persisted mutation sent with its document is
// (Request.Hash); PersistedQueryNotFound tells the server's answer that it
// does not know the hash. A body that is not a GraphQL request this package
// reads (another content type, a document that does not parse) is
// ErrNotGraphQL: the proxy then protects it as any request on the route.
package graphqlop
