// Package jsonread reads JSON request bodies in place, for the proxy's key
// sources and fingerprints: Find returns the value an RFC 6901 pointer names,
// AppendCanonical writes the canonical form a fingerprint hashes (members
// sorted, whitespace dropped, chosen values left out), Validate says whether
// a body is one JSON text, AppendMembers returns every value of a top-level
// member, however often its name repeats. Nothing is copied or kept beyond
// what a call returns; every function that recurses is bounded by MaxDepth,
// and AppendMembers does not recurse.
package jsonread
